"""The memory service against bad input and odd requests, on a real uvicorn on loopback (issue 23): every bad
input is a 4xx JSON error naming the field and writes nothing; Host/Origin/CSRF/content-type checks at the
HTTP level; the smaller items (huge offset, CR/LF and control characters in names, a 李 export, filter keys
with quotes and null values, ids with '/', a locked database, duplicates, an empty PATCH)."""

from __future__ import annotations

import copy
import json
import re
import sqlite3
import threading

import pytest

from tests.server_helpers import ALICE, ROOT, client, memory_server, snapshot

pytest.importorskip("fastapi", reason="the server tests need the 'serve' extra: pip install 'memrl[serve]'")

from memrl.memory.embedders.providers import HashingEmbedder  # noqa: E402
from memrl.memory.facade.memory import AsyncMemory  # noqa: E402
from memrl.server.http import ServerThread, Tokens  # noqa: E402
from memrl.server.memory_api import create_app  # noqa: E402

NDJSON = {"content-type": "application/x-ndjson"}


@pytest.fixture()
def api(tmp_path):
    db = tmp_path / "m.db"
    with memory_server(db, tokens=[]) as (url, memory):
        yield url, db, memory


def _export(c, ns: str = "alice") -> list[dict]:
    return [json.loads(x) for x in c.get(f"/v1/namespaces/{ns}/export").text.splitlines()]


def _seed(c) -> None:
    assert c.post("/v1/namespaces/alice/memories", json={"content": "Alice lives in Lisbon", "memory_id": "m1",
                  "metadata": {"say \"hi\"": "yes", "pet": None, "age": 30}}).status_code == 201  # fmt: skip
    c.patch("/v1/namespaces/alice/memories/m1", json={"content": "Alice lives in Porto"})


def test_bad_inputs_name_the_field_and_write_nothing(api) -> None:
    url, db, _ = api
    c = client(url, None)
    _seed(c)
    before = snapshot(db)
    cases = [
        ("GET", "/v1/namespaces/alice/memories", {"params": {"offset": 10**30}}, 422, "offset"),
        ("GET", "/v1/namespaces/alice/memories", {"params": {"offset": 2**63}}, 422, "offset"),
        ("POST", "/v1/namespaces/alice/memories", {"json": {"content": "x", "memory_id": "a\r\nb"}}, 422, "memory_id"),
        ("POST", "/v1/namespaces/alice/memories", {"json": {"content": "x", "session": "s\x07"}}, 422, "session"),
        ("POST", "/v1/namespaces/alice/memories", {"json": {"content": "x", "evidence": "D1:3"}}, 422, "evidence"),
        ("POST", "/v1/namespaces/alice/memories", {"json": {"content": "x", "evidence": ["ok", "b\x00"]}}, 422, "evidence"),
        ("POST", "/v1/namespaces/alice/memories", {"json": {"content": "   "}}, 422, "content"),
        ("POST", "/v1/namespaces/alice/memories", {"json": {"content": "x", "memory_id": ""}}, 422, "memory_id"),
        ("POST", "/v1/namespaces/alice/memories", {"content": b'{"content": "x", "metadata": {"k": Infinity}}',
                                                   "headers": {"content-type": "application/json"}}, 422, "metadata"),
        ("POST", "/v1/namespaces/a%0D%0Ab/memories", {"json": {"content": "x"}}, 422, "namespace"),
        ("POST", "/v1/namespaces/a%07b/memories", {"json": {"content": "x"}}, 422, "namespace"),
        ("POST", "/v1/namespaces/alice/search", {"json": {"query": "x", "filters": {"k": {"nested": 1}}}}, 422, "filters"),
        ("POST", "/v1/namespaces/alice/search", {"json": {"query": "x", "filters": {"": 1}}}, 422, "filters"),
        ("POST", "/v1/namespaces/alice/memories", {"json": {"content": "dup", "memory_id": "m1"}}, 409, "already exists"),
    ]  # fmt: skip
    for method, path, kw, status, word in cases:
        r = c.request(method, path, **kw)
        assert r.status_code == status, (method, path, kw, r.status_code, r.text)
        err = r.json()["error"]
        assert word in err["message"] or word == err.get("field"), (path, err)
        assert str(db) not in r.text
    assert snapshot(db) == before


def test_import_reports_each_bad_line_and_writes_nothing(api) -> None:
    url, db, _ = api
    c = client(url, None)
    _seed(c)
    lines = _export(c)
    kinds = [x["kind"] for x in lines]
    item, hist = kinds.index("item"), kinds.index("history")
    before = snapshot(db)

    def with_line(i: int, change) -> str:
        out = copy.deepcopy(lines)
        change(out[i])
        return "\n".join(json.dumps(x) for x in out)

    bad = {
        "history old is a number": (with_line(hist, lambda h: h.update(new=5)), "new"),
        "deleted is the string no": (with_line(item, lambda i: i.update(deleted="no")), "deleted"),
        "evidence is a string": (with_line(item, lambda i: i.update(evidence="D1:3")), "evidence"),
        "empty id": (with_line(item, lambda i: i.update(id="")), "id"),
        "unknown field": (with_line(item, lambda i: i.update(colour="red")), "colour"),
        "unknown kind": (with_line(item, lambda i: i.update(kind="gadget")), "kind"),
        "content too long": (with_line(item, lambda i: i.update(content="x" * 20_000)), "content"),
        "type core": (with_line(item, lambda i: i.update(type="core")), "type"),
        "history of a missing item": (
            with_line(hist, lambda h: (h.update(memory_id="ghost"), h["new"].update(id="ghost"))),
            "memory_id",
        ),
        "history snapshot of another id": (with_line(hist, lambda h: h["new"].update(id="m9")), "new"),
        "created_at a string": (with_line(item, lambda i: i.update(created_at="yesterday")), "created_at"),
        "not JSON": ("\n".join([json.dumps(lines[0]), "{oops"]), "line"),
        "no header": ("\n".join(json.dumps(x) for x in lines[1:]), "kind"),
        "huge core": (
            json.dumps(lines[0]) + "\n" + json.dumps({"kind": "core", "content": "c" * 100_001}),
            "content",
        ),
        "not UTF-8": (json.dumps(lines[0]).encode() + b"\n\xff\xfe\n", "line"),
    }
    for name, (body, field) in bad.items():
        r = c.post("/v1/namespaces/alice/import", params={"overwrite": True}, content=body, headers=NDJSON)
        assert r.status_code == 422, (name, r.text)
        err = r.json()["error"]
        assert err["lines"] and err["lines"][0]["field"] == field, (name, err)
        assert isinstance(err["lines"][0]["line"], int) and "nothing written" in err["message"], name
    assert snapshot(db) == before
    # the export itself still imports, over itself and into a new namespace
    body = "\n".join(json.dumps(x) for x in lines)
    r = c.post("/v1/namespaces/alice-2/import", content=body, headers=NDJSON)
    assert r.status_code == 201 and r.json()["items"] == 1 and r.json()["lines"] == len(lines)
    assert c.post("/v1/namespaces/alice-2/memories/m1/undo").json()[0]["op"] == "UPDATE"  # history works


def test_an_export_larger_than_the_body_limit_imports(api) -> None:
    url, _, _ = api
    c = client(url, None)
    for i in range(30):  # 30 items of ~9,000 chars, each edited once: ~1.1 MB of export, above the body limit
        mid = f"big{i}"
        c.post("/v1/namespaces/big/memories", json={"content": f"{i} " + "word " * 1800, "memory_id": mid})
        c.patch(f"/v1/namespaces/big/memories/{mid}", json={"content": f"{i} " + "term " * 1800})
    exported = c.get("/v1/namespaces/big/export").content
    assert len(exported) > 1_000_000
    assert c.post("/v1/namespaces/big/memories", content=b"x" * 1_100_000,
                  headers={"content-type": "application/json"}).status_code == 413  # fmt: skip
    r = c.post("/v1/namespaces/big-copy/import", content=exported, headers=NDJSON)
    assert r.status_code == 201 and r.json()["items"] == 30, r.text


def test_export_names_and_odd_names(api) -> None:
    url, _, _ = api
    c = client(url, None)
    assert c.post("/v1/namespaces/李/memories", json={"content": "李的记忆"}).status_code == 201
    assert c.post('/v1/namespaces/a"b;c/memories', json={"content": "quoted"}).status_code == 201
    r = c.get("/v1/namespaces/李/export")
    assert r.status_code == 200 and "filename*=UTF-8''%E6%9D%8E.jsonl" in r.headers["content-disposition"]
    assert json.loads(r.text.splitlines()[0])["namespace"] == "李"
    r = c.get('/v1/namespaces/a"b;c/export')
    assert r.status_code == 200 and 'filename="a_b;c.jsonl"' in r.headers["content-disposition"]


def test_filters_ids_with_slashes_and_empty_patch(api) -> None:
    url, _, _ = api
    c = client(url, None)
    _seed(c)

    def hits(filters) -> list[str]:
        r = c.post("/v1/namespaces/alice/search", json={"query": "Alice", "filters": filters, "mode": "bm25"})
        assert r.status_code == 200, r.text
        return [h["id"] for h in r.json()]

    assert hits({'say "hi"': "yes"}) == ["m1"]  # a key holding a double quote works
    assert hits({"pet": None}) == ["m1"]  # null matches a JSON null
    assert hits({"age": 30}) == ["m1"] and hits({"age": [29, 30]}) == ["m1"] and hits({"age": "30"}) == []
    assert hits({"missing": None}) == []  # an absent key is not a null value
    # ids with "/" are reachable on every item route
    assert (
        c.post(
            "/v1/namespaces/alice/memories", json={"content": "slashed", "memory_id": "conv/D1:3"}
        ).status_code
        == 201
    )
    assert c.get("/v1/namespaces/alice/memories/conv/D1:3").json()["content"] == "slashed"
    assert (
        c.patch("/v1/namespaces/alice/memories/conv/D1:3", json={"content": "slashed 2"}).status_code == 200
    )
    assert [e["op"] for e in c.get("/v1/namespaces/alice/memories/conv/D1:3/history").json()] == [
        "ADD",
        "UPDATE",
    ]
    assert c.post("/v1/namespaces/alice/memories/conv/D1:3/undo").status_code == 200
    assert c.delete("/v1/namespaces/alice/memories/conv/D1:3").json()["deleted"] is True
    assert c.post("/v1/namespaces/alice/memories/conv/D1:3/restore").json()["deleted"] is False
    # a PATCH that changes nothing writes no history entry
    n = len(c.get("/v1/namespaces/alice/memories/m1/history").json())
    assert c.patch("/v1/namespaces/alice/memories/m1", json={}).status_code == 200
    assert (
        c.patch("/v1/namespaces/alice/memories/m1", json={"content": "Alice lives in Porto"}).status_code
        == 200
    )
    assert len(c.get("/v1/namespaces/alice/memories/m1/history").json()) == n


def test_a_locked_database_is_503_with_retry_after(tmp_path) -> None:
    db = tmp_path / "m.db"
    memory = AsyncMemory(db, embedder=HashingEmbedder(64), busy_timeout=0.2)
    with ServerThread(create_app(memory, Tokens())) as server:
        c = client(server.base_url, None)
        assert c.post("/v1/namespaces/alice/memories", json={"content": "first"}).status_code == 201
        holder = sqlite3.connect(db, check_same_thread=False, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock
        try:
            r = c.post("/v1/namespaces/alice/memories", json={"content": "second"})
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text
        assert r.json()["error"]["type"] == "busy" and str(db) not in r.text
        assert c.post("/v1/namespaces/alice/memories", json={"content": "second"}).status_code == 201


def test_host_origin_csrf_and_content_type_checks(tmp_path) -> None:
    db = tmp_path / "m.db"
    with memory_server(db) as (url, _):
        port = url.rsplit(":", 1)[1]
        c = client(url, ROOT)
        add = {"json": {"content": "x"}}
        assert c.get("/health", headers={"host": "evil.example"}).status_code == 421
        assert (
            c.post(
                "/v1/namespaces/alice/memories", headers={"host": f"evil.example:{port}"}, **add
            ).status_code
            == 421
        )
        for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
            assert c.get("/health", headers={"host": host}).status_code == 200
        cross = [{"origin": "http://127.0.0.1:1"}, {"origin": "null"}, {"origin": "http://evil.example"},
                 {"sec-fetch-site": "cross-site"}, {"sec-fetch-site": "same-site"}]  # fmt: skip
        for headers in cross:
            r = c.post("/v1/namespaces/alice/memories", headers=headers, **add)
            assert r.status_code == 403 and r.json()["error"]["type"] == "cross_origin", headers
        assert c.post("/v1/namespaces/alice/memories", headers={"origin": url}, **add).status_code == 201
        assert (
            c.post(
                "/v1/namespaces/alice/memories", headers={"sec-fetch-site": "same-origin"}, **add
            ).status_code
            == 201
        )
        for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
            r = c.post(
                "/v1/namespaces/alice/memories", content=b'{"content": "x"}', headers={"content-type": ctype}
            )
            assert r.status_code == 415, ctype
            r = c.post("/v1/namespaces/alice/import", content=b"{}", headers={"content-type": ctype})
            assert r.status_code == 415, ctype
        page = c.get("/ns/alice")
        assert page.headers["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert (
            "'unsafe-inline'"
            not in page.headers["content-security-policy"].split("script-src")[1].split(";")[0]
        )
        # browser forms need their CSRF token, even from the page's own origin
        mid = c.get("/v1/namespaces/alice/memories").json()["items"][0]["id"]
        cookie = {"cookie": f"memrl_token={ALICE}"}
        r = c.post(f"/ns/alice/item/{mid}/delete", headers={**cookie, "origin": url}, follow_redirects=False)
        assert r.status_code == 403 and "CSRF" in r.text
        item_page = c.get(f"/ns/alice/item/{mid}", headers=cookie).text
        token = re.search(r'name="csrf" value="([0-9a-f]+)"', item_page).group(1)
        r = c.post(f"/ns/alice/item/{mid}/delete", content=f"csrf={token}", follow_redirects=False,
                   headers={**cookie, "origin": url, "content-type": "application/x-www-form-urlencoded"})  # fmt: skip
        assert r.status_code == 303 and c.get(f"/v1/namespaces/alice/memories/{mid}").status_code == 404
        # another visitor's (another cookie's) token does not work
        other = {"cookie": f"memrl_token={ROOT}"}
        r = c.post(f"/ns/alice/item/{mid}/restore", content=f"csrf={token}", follow_redirects=False,
                   headers={**other, "content-type": "application/x-www-form-urlencoded"})  # fmt: skip
        assert r.status_code == 403


def test_allowed_origin_option(tmp_path) -> None:
    from memrl.server.guard import Policy

    memory = AsyncMemory(tmp_path / "m.db", embedder=HashingEmbedder(64))
    policy = Policy.for_server("127.0.0.1", ["https://notes.example.org"])
    with ServerThread(create_app(memory, Tokens(), policy=policy)) as server:
        c = client(server.base_url, None)
        ok = c.post(
            "/v1/namespaces/a/memories",
            json={"content": "x"},
            headers={"origin": "https://notes.example.org"},
        )
        assert ok.status_code == 201
        assert c.get("/health", headers={"host": "notes.example.org"}).status_code == 200
        no = c.post(
            "/v1/namespaces/a/memories",
            json={"content": "x"},
            headers={"origin": "https://notes.example.org:8443"},
        )
        assert no.status_code == 403
    with pytest.raises(ValueError, match="allowed-origin"):
        Policy.for_server("127.0.0.1", ["notes.example.org"])


def test_concurrent_requests_with_checks_on_lose_nothing(api) -> None:
    url, _, _ = api
    errors: list[int] = []

    def worker(i: int) -> None:
        c = client(url, None)
        for j in range(20):
            r = c.post(
                "/v1/namespaces/alice/memories", json={"content": f"w{i} n{j}"}, headers={"origin": url}
            )
            if r.status_code != 201:
                errors.append(r.status_code)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and client(url, None).get("/v1/namespaces/alice/memories").json()["total"] == 80


def test_one_tenants_writes_do_not_move_anothers_scores_over_rest(tmp_path) -> None:
    """The side channel of the issue: alice's bm25_score for a word must not drop when bob stores it."""
    from tests.server_helpers import BOB

    with memory_server(tmp_path / "m.db") as (url, _):
        alice, bob = client(url, ALICE), client(url, BOB)
        for text in ("Alice moved to Lisbon", "Alice likes tea", "Alice paints", "Alice runs"):
            alice.post("/v1/namespaces/alice/memories", json={"content": text}).raise_for_status()

        def seen() -> list:
            hits = alice.post("/v1/namespaces/alice/search", json={"query": "Lisbon", "mode": "bm25"}).json()
            return [(h["id"], h["bm25_score"]) for h in hits]

        before = seen()
        assert before and before[0][1] > 0
        for i in range(20):
            bob.post("/v1/namespaces/bob/memories", json={"content": f"Lisbon Lisbon {i}"}).raise_for_status()
        assert bob.post("/v1/namespaces/alice/search", json={"query": "Lisbon"}).status_code == 403
        assert seen() == before
