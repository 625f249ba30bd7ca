"""The memory REST API over real HTTP on loopback: every route, token scopes on every route, clear 4xx
errors that leave the store unchanged, deleted items never returned, OpenAPI from the tools' models."""

from __future__ import annotations

import json

import pytest

from memrl.cli.serve_cmd import legacy_argv  # noqa: I001
from memrl.server.http import Limits
from memrl.server.memory_api import ROUTES, request_model
from memrl.tools.service import search_memories
from tests.server_helpers import ALICE, BOB, ROOT, client, memory_server, snapshot


@pytest.fixture
def api(db_path):
    with memory_server(db_path, limits=Limits(max_body_bytes=20_000)) as (url, memory):
        yield url, memory


def test_every_route_round_trip(api, db_path) -> None:
    url, _ = api
    c = client(url, ALICE)
    r = c.post("/v1/namespaces/alice/memories", json={"content": "Alice moved to Lisbon in May 2023",
               "memory_type": "episodic", "metadata": {"date": "2023-05"}, "evidence": ["D1:3"]})  # fmt: skip
    assert r.status_code == 201, r.text
    a = r.json()["id"]
    b = c.post("/v1/namespaces/alice/memories", json={"content": "Alice drinks green tea"}).json()["id"]

    hits = c.post("/v1/namespaces/alice/search", json={"query": "Lisbon May", "top_k": 5}).json()
    assert hits[0]["id"] == a
    assert {"score", "dense_score", "bm25_score", "dense_rank", "bm25_rank"} <= set(hits[0])
    assert hits[0]["bm25_rank"] == 1 and hits[0]["dense_score"] is not None
    only = c.post(
        "/v1/namespaces/alice/search", json={"query": "Alice", "mode": "bm25", "types": ["semantic"]}
    ).json()
    assert [h["id"] for h in only] == [b] and only[0]["dense_rank"] is None
    filtered = c.post(
        "/v1/namespaces/alice/search", json={"query": "Alice", "filters": {"date": "2023-05"}}
    ).json()
    assert [h["id"] for h in filtered] == [a]

    assert c.get(f"/v1/namespaces/alice/memories/{a}").json()["evidence"] == ["D1:3"]
    listing = c.get("/v1/namespaces/alice/memories", params={"types": ["episodic"], "limit": 10}).json()
    assert listing["total"] == 1 and [i["id"] for i in listing["items"]] == [a]
    r = c.patch(f"/v1/namespaces/alice/memories/{a}", json={"content": "Alice moved to Porto in June 2023"})
    assert r.json()["content"].startswith("Alice moved to Porto")
    history = c.get(f"/v1/namespaces/alice/memories/{a}/history").json()
    assert [e["op"] for e in history] == ["ADD", "UPDATE"] and history[1]["old_content"].endswith("May 2023")
    undone = c.post(f"/v1/namespaces/alice/memories/{a}/undo").json()
    assert undone[0]["op"] == "UPDATE"
    assert c.get(f"/v1/namespaces/alice/memories/{a}").json()["content"].endswith("May 2023")

    assert (
        c.delete(f"/v1/namespaces/alice/memories/{b}", params={"reason": "wrong"}).json()["deleted"] is True
    )
    assert c.get(f"/v1/namespaces/alice/memories/{b}").status_code == 404
    assert c.get(f"/v1/namespaces/alice/memories/{b}", params={"include_deleted": True}).json()["deleted"]
    assert c.post(f"/v1/namespaces/alice/memories/{b}/restore").json()["deleted"] is False
    assert c.post("/v1/namespaces/alice/undo").json()[0]["op"] == "RESTORE"  # the namespace's latest change
    ns_history = c.get("/v1/namespaces/alice/history").json()
    assert len(ns_history) == 7 and ns_history[-1]["op"] == "UNDO"

    assert c.post("/v1/namespaces/alice/clone", json={"target": "alice-copy"}).json()["items"] == 1
    assert [n["name"] for n in c.get("/v1/namespaces").json()] == ["alice", "alice-copy"]
    assert c.get("/v1/namespaces/alice/core").json() == {"namespace": "alice", "content": ""}

    exported = c.get("/v1/namespaces/alice/export")
    assert exported.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(x) for x in exported.text.splitlines()]
    assert [x["kind"] for x in lines].count("item") == 2 and [x["kind"] for x in lines].count("history") == 7
    r = c.post("/v1/namespaces/alice-copy/import", content=exported.text, params={"overwrite": True},
               headers={"content-type": "application/x-ndjson"})  # fmt: skip
    assert r.status_code == 201 and r.json()["items"] == 2
    assert c.get(f"/v1/namespaces/alice-copy/memories/{b}", params={"include_deleted": True}).json()[
        "deleted"
    ]
    assert len(c.get("/v1/namespaces/alice-copy/history").json()) == 7


def _every_request(ns: str, mid: str = "m1") -> list[tuple[str, str, dict]]:
    """One request per route, aimed at namespace ``ns``."""
    base = f"/v1/namespaces/{ns}"
    return [
        ("POST", f"{base}/memories", {"json": {"content": "x"}}),
        ("GET", f"{base}/memories", {}),
        ("POST", f"{base}/search", {"json": {"query": "x"}}),
        ("GET", f"{base}/memories/{mid}", {}),
        ("PATCH", f"{base}/memories/{mid}", {"json": {"content": "y"}}),
        ("DELETE", f"{base}/memories/{mid}", {}),
        ("POST", f"{base}/memories/{mid}/restore", {}),
        ("GET", f"{base}/memories/{mid}/history", {}),
        ("GET", f"{base}/history", {}),
        ("POST", f"{base}/memories/{mid}/undo", {}),
        ("POST", f"{base}/undo", {}),
        ("POST", f"{base}/clone", {"json": {"target": f"{ns}-2"}}),
        ("GET", f"{base}/core", {}),
        ("GET", f"{base}/export", {}),
        ("POST", f"{base}/import", {"content": "{}", "headers": {"content-type": "application/x-ndjson"}}),
    ]


def test_a_token_cannot_reach_another_namespace_on_any_route(api, db_path) -> None:
    url, _ = api
    client(url, BOB).post("/v1/namespaces/bob/memories", json={"content": "Bob's secret", "memory_id": "m1"})
    before = snapshot(db_path)
    alice, anonymous, wrong = client(url, ALICE), client(url, None), client(url, "not-a-token-at-all")
    requests = _every_request("bob")
    assert len(requests) == len(ROUTES) + 4  # every memory route + clone, core, export, import
    for method, path, kw in requests:
        r = alice.request(method, path, **kw)
        assert r.status_code == 403, (method, path, r.text)
        assert r.json()["error"]["type"] == "forbidden" and "bob" in r.json()["error"]["message"]
        assert anonymous.request(method, path, **kw).status_code == 401
        assert wrong.request(method, path, **kw).status_code == 401
    # cloning into another's namespace is refused too, and listing shows only one's own
    assert alice.post("/v1/namespaces/alice/clone", json={"target": "bob"}).status_code == 403
    assert alice.get("/v1/namespaces").json() == []
    assert [n["name"] for n in client(url, ROOT).get("/v1/namespaces").json()] == ["bob"]
    assert snapshot(db_path) == before
    assert client(url, BOB).get("/v1/namespaces/bob/memories/m1").json()["content"] == "Bob's secret"


def test_bad_requests_get_clear_4xx_and_change_nothing(api, db_path) -> None:
    url, _ = api
    c = client(url, ALICE)
    c.post("/v1/namespaces/alice/memories", json={"content": "Alice lives in Lisbon", "memory_id": "m1"})
    before = snapshot(db_path)
    cases = [
        ("POST", "/v1/namespaces/alice/memories", {"content": b'{"content": "x",', "headers": {"content-type": "application/json"}}, 400, "malformed JSON"),
        ("POST", "/v1/namespaces/alice/memories", {"content": b"content=x"}, 415, "Content-Type application/json"),
        ("POST", "/v1/namespaces/alice/memories", {"content": b'{"content": "x"}', "headers": {"content-type": "text/plain"}}, 415, "not 'text/plain'"),
        ("POST", "/v1/namespaces/alice/memories", {"json": ["a list"]}, 400, "JSON object"),
        ("POST", "/v1/namespaces/alice/memories", {"json": {"content": "x" * 30_000}}, 413, "larger than the limit"),
        ("POST", "/v1/namespaces/alice/memories", {"content": (b"x" for _ in range(30_000)), "headers": {"content-type": "application/json"}}, 413, "limit"),
        ("POST", "/v1/namespaces/alice/memories", {"json": {"content": 42}}, 422, "content"),
        ("POST", "/v1/namespaces/alice/memories", {"json": {"content": "x", "memory_type": "core"}}, 422, "memory_type"),
        ("POST", "/v1/namespaces/alice/memories", {"json": {"content": "x", "colour": "red"}}, 422, "unknown field"),
        ("POST", "/v1/namespaces/alice/memories", {"json": {"content": "dup", "memory_id": "m1"}}, 409, "already exists"),
        ("POST", "/v1/namespaces/alice/search", {"json": {"query": "x", "top_k": "many"}}, 422, "top_k"),
        ("POST", "/v1/namespaces/alice/search", {"json": {"query": "x", "mode": "magic"}}, 422, "mode"),
        ("GET", "/v1/namespaces/alice/memories", {"params": {"limit": 0}}, 422, "limit"),
        ("GET", "/v1/namespaces/alice/memories/nope", {}, 404, "does not exist"),
        ("PATCH", "/v1/namespaces/alice/memories/nope", {"json": {"content": "y"}}, 404, "does not exist"),
        ("DELETE", "/v1/namespaces/alice/memories/nope", {}, 404, "does not exist"),
        ("POST", "/v1/namespaces/alice/memories/m1/restore", {}, 422, "not deleted"),
        ("POST", "/v1/namespaces/alice/memories/nope/undo", {}, 404, "nothing to undo"),
        ("POST", "/v1/namespaces/alice-copy/clone", {"json": {"target": "alice"}}, 404, "does not exist"),
        ("POST", "/v1/namespaces/alice/clone", {"json": {"target": "alice"}}, 422, "onto itself"),
        ("POST", "/v1/namespaces/alice/import", {"content": '{"kind": "item"}', "headers": {"content-type": "application/x-ndjson"}}, 422, "header"),
        ("GET", "/v1/nowhere", {}, 404, "no such route"),
    ]  # fmt: skip
    for method, path, kw, status, words in cases:
        r = c.request(method, path, **kw)
        assert r.status_code == status, (method, path, r.status_code, r.text)
        body = r.json()
        assert set(body) == {"error"} and words in body["error"]["message"], (path, body)
    assert snapshot(db_path) == before


def test_deleted_items_are_never_returned_by_search(api) -> None:
    url, _ = api
    c = client(url, ALICE)
    ids = [c.post("/v1/namespaces/alice/memories", json={"content": f"Alice visited Rome on day {i}"}).json()["id"]
           for i in range(12)]  # fmt: skip
    for mid in ids[::2]:
        assert c.delete(f"/v1/namespaces/alice/memories/{mid}").status_code == 200
    for mode in ("hybrid", "dense", "bm25"):
        got = [
            h["id"]
            for h in c.post(
                "/v1/namespaces/alice/search", json={"query": "Alice Rome day", "mode": mode, "top_k": 50}
            ).json()
        ]
        assert sorted(got) == sorted(ids[1::2]), mode
    listed = [i["id"] for i in c.get("/v1/namespaces/alice/memories").json()["items"]]
    assert sorted(listed) == sorted(ids[1::2])


def test_openapi_comes_from_the_tools_models(api) -> None:
    url, _ = api
    doc = client(url, None).get("/openapi.json").json()
    schema = doc["components"]["schemas"]["SearchMemoriesRequest"]
    tool_schema = search_memories.model.model_json_schema()
    assert schema["properties"].keys() == tool_schema["properties"].keys()
    assert schema["properties"]["top_k"]["maximum"] == 100
    assert schema["properties"]["query"]["description"] == "What to look for, in natural language."
    paths = doc["paths"]
    assert {"post", "get"} <= set(paths["/v1/namespaces/{namespace}/memories"])
    # the bearer scheme is declared, so /docs has an Authorize button and "Try it out" sends the token
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    v1 = [op for path, ops in paths.items() if path.startswith("/v1/") for op in ops.values()]
    assert v1 and all(op["security"] == [{"bearer": []}] for op in v1)
    for route in ROUTES:
        model = request_model(route)
        assert route.path.replace(":path}", "}") in {p[3:] for p in paths}
        if model is not None:
            assert "memory_id" not in model.model_fields or "{memory_id}" not in route.path


def test_health_and_the_old_serve_form() -> None:
    assert legacy_argv(["serve", "--provider", "local"]) == ["serve", "llm", "--provider", "local"]
    assert legacy_argv(["serve", "memory", "--db", "x"]) == ["serve", "memory", "--db", "x"]
    assert legacy_argv(["serve"]) == ["serve", "llm"]
    from memrl.cli.main import build_parser

    args = build_parser().parse_args(legacy_argv(["serve", "--provider", "scripted", "--port", "0"]))
    assert args.server == "llm" and args.provider == "scripted"


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "memory", "--port", "0", "--token", f"a={ALICE}:alice"],
        ["ui", "--no-open"],
        ["serve", "reward", "--port", "0"],
    ],
)
def test_the_entry_points_run_from_the_command_line(tmp_path, argv) -> None:
    """`memrl serve memory`, `memrl ui` and `memrl serve reward` as a user starts them (a real process)."""
    import subprocess
    import sys

    import httpx

    db = ["--db", str(tmp_path / "m.db"), "--embedder", "hashing"] if argv[1] != "reward" else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "memrl.cli.main", *argv, *db], stdout=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving "), line
        url = line.split(" at ")[1].split()[0]
        assert httpx.get(url + "/health", timeout=10).json()["status"] == "ok"
        if argv[1] == "memory":
            r = httpx.post(url + "/v1/namespaces/alice/memories", json={"content": "Alice likes tea"},
                           headers={"Authorization": f"Bearer {ALICE}"})  # fmt: skip
            assert r.status_code == 201
            assert httpx.get(url + "/v1/namespaces").status_code == 401
        elif argv[0] == "ui":
            assert "Namespaces" in httpx.get(url + "/").text
        else:
            r = httpx.post(
                url + "/v1/score",
                json={"items": [{"metric": "exact_match", "prediction": "a", "answers": ["A"]}]},
            )
            assert r.json()["results"][0]["score"] == 1.0
    finally:
        proc.terminate()
        proc.wait(timeout=10)
