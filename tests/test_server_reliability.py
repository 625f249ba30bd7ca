"""Many concurrent API clients on one namespace lose nothing: a bounded load test on loopback (it prints
requests per second; timing is not asserted, see bench/service.py for figures) that checks every write."""

from __future__ import annotations

from memrl.server.load import add_request, run_load, search_request  # noqa: I001
from tests.server_helpers import ALICE, client, memory_server

CLIENTS, PER_CLIENT = 8, 25


def test_concurrent_writers_lose_no_update(db_path, capsys) -> None:
    with memory_server(db_path) as (url, memory):
        adds = run_load(url, ALICE, clients=CLIENTS, per_client=PER_CLIENT, make_request=add_request("alice"))
        assert adds.statuses == {201: CLIENTS * PER_CLIENT}
        ids = {body["id"]: body["content"] for _, _, _, body in adds.results}
        assert len(ids) == CLIENTS * PER_CLIENT  # every write got its own id

        # every client now rewrites each of its own memories, all at once
        mine = {
            (body["content"].split()[1], body["content"].split()[3]): body["id"] for *_, body in adds.results
        }

        def update(c: int, i: int):
            return (
                "PATCH",
                f"/v1/namespaces/alice/memories/{mine[(str(c), str(i))]}",
                {"content": f"client {c} note {i} v2"},
            )

        updates = run_load(url, ALICE, clients=CLIENTS, per_client=PER_CLIENT, make_request=update)
        assert updates.statuses == {200: CLIENTS * PER_CLIENT}
        searches = run_load(url, ALICE, clients=CLIENTS, per_client=10, make_request=search_request("alice"))
        assert searches.statuses == {200: CLIENTS * 10}

        c = client(url, ALICE)
        listing = c.get("/v1/namespaces/alice/memories", params={"limit": 1000}).json()
        assert listing["total"] == CLIENTS * PER_CLIENT
        got = {i["id"]: i["content"] for i in listing["items"]}
        for (cl, i), mid in mine.items():
            assert got[mid] == f"client {cl} note {i} v2"
        history = c.get("/v1/namespaces/alice/history", params={"limit": 10_000}).json()
        assert sorted(e["op"] for e in history) == ["ADD"] * 200 + ["UPDATE"] * 200
        assert len({e["seq"] for e in history}) == 400
    with capsys.disabled():
        for name, rep in (("add", adds), ("update", updates), ("search", searches)):
            print(f"\n[load] {name}: {rep.requests} requests from {CLIENTS} clients: {rep.rps:.0f} req/s "
                  f"(p50 {rep.latency_ms(0.5):.1f} ms)", end="")  # fmt: skip
