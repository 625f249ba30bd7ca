"""One rule for what a stored value may be (issue 33), on SQLite and on Postgres, over real HTTP: a value the
rule accepts stays searchable, listable, exportable and importable; a value it refuses gets a 4xx JSON error
naming the field and changes nothing (the embedding cache included); reserved ids and a clone onto itself
are refused; numbers that do not fit both back-ends are refused wherever they come in; a minimal
hand-written import works; a bug's 500 is JSON."""

from __future__ import annotations

import json
import random
import string

import pytest

from tests.server_helpers import ROOT, client, memory_server, snapshot

pytest.importorskip("fastapi", reason="the server tests need the 'serve' extra: pip install 'memrl[serve]'")

from memrl.errors import ValidationError  # noqa: E402
from memrl.memory.embedders.base import Embedder  # noqa: E402
from memrl.memory.facade.memory import AsyncMemory  # noqa: E402
from memrl.memory.store.base import CORE_ID  # noqa: E402
from memrl.server.http import ServerThread, Tokens  # noqa: E402
from memrl.server.memory_api import create_app  # noqa: E402

NDJSON = {"content-type": "application/x-ndjson"}
RAW_JSON = {"content-type": "application/json"}
#: What a database error must never show a client.
LEAKS = ("INSERT", "SELECT", "UPDATE ", "cannot reach the database", "CONTEXT", "postgresql://", "Traceback")


def _json_error(r, status: int = 422) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json"), r.headers
    err = r.json()["error"]
    assert err["message"] and not any(x in r.text for x in LEAKS), r.text
    return err


def _lines(*objs: dict) -> str:
    return "\n".join(json.dumps(o) for o in objs)


HEADER = {"kind": "header", "format": "memrl-export", "version": 1, "namespace": "x"}


def test_metadata_of_any_accepted_type_keeps_search_working(db_path) -> None:
    """Values the schema accepted made every later search 500: a number as ``date`` (SQLite and Postgres), a
    list or object as ``unit`` (Postgres). Search now reads metadata the same way on both back-ends."""
    metas = [{"date": 5}, {"date": 1.5}, {"date": True}, {"unit": ["a"]}, {"unit": {"k": 1}}, {"speaker": 7},
             {"speaker": ["Alice"]}, {"mentions_time": "yes"}, {"mentions_time": [1]}, {"unit": None}]  # fmt: skip
    queries = ["What did Alice say in May 2023?", "When did Alice move?", "Alice", "Bob said"]
    with memory_server(db_path) as (url, _):
        c = client(url, ROOT)
        for i, meta in enumerate(metas):
            ns = f"m{i}"
            assert c.post(f"/v1/namespaces/{ns}/memories", json={"content": "Alice said hi in May 2023",
                          "metadata": meta}).status_code == 201  # fmt: skip
            c.post(f"/v1/namespaces/{ns}/memories", json={"content": "Bob moved in May 2023",
                   "metadata": {"speaker": "Bob", "unit": "u1", "date": "2023-05-01"}})  # fmt: skip
            for q in queries:
                r = c.post(f"/v1/namespaces/{ns}/search", json={"query": q})
                assert r.status_code == 200 and len(r.json()) == 2, (meta, q, r.text)
            assert c.get(f"/v1/namespaces/{ns}/memories").status_code == 200
            export = c.get(f"/v1/namespaces/{ns}/export").text
            r = c.post(f"/v1/namespaces/{ns}-copy/import", content=export, headers=NDJSON)
            assert r.status_code == 201, r.text


def test_values_outside_the_rule_are_refused_and_change_nothing(db_path) -> None:
    """A lone surrogate in metadata was stored while the POST answered 500 (then list, history, search and
    export failed); NUL in metadata was a 500 exposing SQL on Postgres; numbers past 64 bits, NaN, a nesting
    too deep and forged derived keys were stored. Each is now a 422 naming the field, and nothing changed."""
    deep: dict = {}
    node = deep
    for _ in range(30):
        node["d"] = {}
        node = node["d"]
    bad_metadata = [
        '{"k": "\\ud800"}', '{"k": ["ok", "\\udfff"]}', '{"\\ud800": 1}', '{"k": "a\\u0000b"}',
        '{"k": {"a\\u0000": 1}}', '{"k": 1180591620717411303424}', '{"k": -9223372036854775809}',
        '{"k": NaN}', '{"k": Infinity}', '{"k": 1e400}', json.dumps(deep),
        '{"vector_key": "28887d1884472e2a966da944140212db9b1a54a2cb7e1cabd63c0cdd1e94def2"}',
        '{"dense": "no"}', '{"text": 5}',
    ]  # fmt: skip
    with memory_server(db_path) as (url, _):
        c = client(url, ROOT)
        assert (
            c.post("/v1/namespaces/a/memories", json={"content": "seed", "memory_id": "m1"}).status_code
            == 201
        )
        before = snapshot(db_path)
        for meta in bad_metadata:
            for method, path, body in [
                ("POST", "/v1/namespaces/a/memories", f'{{"content": "new text", "metadata": {meta}}}'),
                ("PATCH", "/v1/namespaces/a/memories/m1", f'{{"content": "other text", "metadata": {meta}}}'),
            ]:
                err = _json_error(c.request(method, path, content=body.encode(), headers=RAW_JSON))
                assert err.get("field") == "metadata", (meta, err)
        for content in ['"bad \\ud800 text"', '"a\\u0000b"']:
            _json_error(c.post("/v1/namespaces/a/memories", content=f'{{"content": {content}}}'.encode(),
                               headers=RAW_JSON))  # fmt: skip
        assert snapshot(db_path) == before
        for path in ("/v1/namespaces/a/memories", "/v1/namespaces/a/history", "/v1/namespaces/a/export"):
            assert c.get(path).status_code == 200
        assert c.post("/v1/namespaces/a/search", json={"query": "seed"}).status_code == 200


async def test_python_api_follows_the_same_rule(db_path) -> None:
    m = AsyncMemory(db_path, embedder="hashing:64")
    try:
        for kwargs in [{"content": "bad \ud800"}, {"content": "ok", "metadata": {"k": "\udc00"}},
                       {"content": "ok", "metadata": {"k": 2**64}}, {"content": "ok", "id": CORE_ID},
                       {"content": "ok", "metadata": {"k": float("nan")}}]:  # fmt: skip
            with pytest.raises(ValidationError):
                await m.add(**kwargs)
        for call in (
            m.core_append("a\x00b"),
            m.search("q\ud800"),
            m.get("x\ud800"),
            m.list(namespace="n\ud800"),
        ):
            with pytest.raises(ValidationError):
                await call
        assert await m.namespaces() == []
    finally:
        await m.close()


def test_a_very_long_token_is_stored_and_found_on_both_backends(db_path) -> None:
    """Postgres refused one 9,000-letter word (its index rows hold ~2.7 KB) with a 500 exposing SQL and
    "cannot reach the database", after writing an embedding-cache row; SQLite stored it."""
    rng = random.Random(33)  # random letters: Postgres compresses index rows, so "xxx..." would fit
    word, findable = ("".join(rng.choice(string.ascii_lowercase) for _ in range(n)) for n in (9000, 290))
    # (a query holds at most 300 characters: the second word is the one searched for)
    with memory_server(db_path) as (url, _):
        c = client(url, ROOT)
        body = {"content": f"the code is {word} and {findable}", "memory_id": "long"}
        assert c.post("/v1/namespaces/a/memories", json=body).status_code == 201
        export = c.get("/v1/namespaces/a/export").text
        assert c.post("/v1/namespaces/b/import", content=export, headers=NDJSON).status_code == 201
        for ns in ("a", "b"):
            hits = c.post(f"/v1/namespaces/{ns}/search", json={"query": findable, "mode": "bm25"}).json()
            assert [h["id"] for h in hits] == ["long"], hits


def test_reserved_ids_are_refused_at_every_entry_point(db_path) -> None:
    """An item could take ``__core__``, the id core memory's history uses: its undo then emptied core memory
    and the namespace's own export no longer imported."""
    with memory_server(db_path) as (url, memory):
        c = client(url, ROOT)
        assert c.post("/v1/namespaces/a/memories", json={"content": "seed"}).status_code == 201
        before = snapshot(db_path)
        for mid in (CORE_ID, "__other__"):
            err = _json_error(c.post("/v1/namespaces/a/memories", json={"content": "x", "memory_id": mid}))
            assert err["field"] == "memory_id" and "reserved" in err["message"]
        item = {
            "kind": "item",
            "id": CORE_ID,
            "type": "semantic",
            "content": "x",
            "created_at": 1,
            "updated_at": 1,
        }
        err = _json_error(c.post("/v1/namespaces/b/import", content=_lines(HEADER, item), headers=NDJSON))
        assert err["lines"][0]["field"] == "id" and "reserved" in err["lines"][0]["message"]
        assert snapshot(db_path) == before
    # core memory's own history still works through the Python API
    import asyncio

    async def core_undo() -> None:
        await memory.core_append("likes tea", namespace="a")
        await memory.core_append("likes jazz", namespace="a")
        await memory.undo(CORE_ID, namespace="a")
        assert await memory.core(namespace="a") == "likes tea"

    asyncio.run(core_undo())


def test_clone_onto_itself_is_refused_and_destroys_nothing(db_path) -> None:
    """``clone alice -> alice`` with overwrite answered 201 with 0 items: items, history and core memory were
    gone and undo answered 404."""
    with memory_server(db_path) as (url, memory):
        c = client(url, ROOT)
        c.post("/v1/namespaces/alice/memories", json={"content": "Alice lives in Lisbon", "memory_id": "m1"})
        c.patch("/v1/namespaces/alice/memories/m1", json={"content": "Alice lives in Porto"})
        before = snapshot(db_path)
        for overwrite in (True, False):
            err = _json_error(
                c.post("/v1/namespaces/alice/clone", json={"target": "alice", "overwrite": overwrite})
            )
            assert (
                err["field"] == "target"
                and "onto itself" in err["message"]
                and "overwrite" not in err["message"]
            )
        assert snapshot(db_path) == before
        assert c.post("/v1/namespaces/alice/memories/m1/undo").status_code == 200
        assert c.get("/v1/namespaces/alice/memories/m1").json()["content"] == "Alice lives in Lisbon"


def test_numbers_that_do_not_fit_get_4xx_in_filters_and_imports(db_path) -> None:
    """Very large or non-finite numbers in search filters and import fields were 500s."""
    with memory_server(db_path) as (url, _):
        c = client(url, ROOT)
        c.post("/v1/namespaces/a/memories", json={"content": "seed", "metadata": {"n": 1}})
        before = snapshot(db_path)
        for value in (
            "1180591620717411303424",
            "-1180591620717411303424",
            "Infinity",
            "-Infinity",
            "NaN",
            "1e400",
        ):
            body = f'{{"query": "seed", "filters": {{"n": {value}}}}}'.encode()
            err = _json_error(c.post("/v1/namespaces/a/search", content=body, headers=RAW_JSON))
            assert err["field"] == "filters", (value, err)
            body = f'{{"query": "seed", "filters": {{"n": [1, {value}]}}}}'.encode()
            _json_error(c.post("/v1/namespaces/a/search", content=body, headers=RAW_JSON))
        item = {
            "kind": "item",
            "id": "i1",
            "type": "semantic",
            "content": "hello",
            "created_at": 1,
            "updated_at": 1,
        }
        hist = {"kind": "history", "seq": 1, "memory_id": "i1", "op": "ADD", "old": None,
                "new": {**{k: v for k, v in item.items() if k != "kind"}}, "at": 1}  # fmt: skip
        for line, field in [
            ({**item, "created_at": "NaN"}, "created_at"), ({**item, "created_at": 1e300}, "created_at"),
            ({**item, "updated_at": "-Infinity"}, "updated_at"), ({**item, "seq": 2**70}, "seq"),
            ({**item, "seq": -1}, "seq"), ({**hist, "seq": 2**64}, "seq"), ({**hist, "at": "Infinity"}, "at"),
            ({**hist, "undone_by": 2**80}, "undone_by"), ({**item, "metadata": {"k": 2**70}}, "metadata"),
            ({"kind": "core", "content": "a\u0000b"}, "content"), ({"kind": "keys", "id": "i1", "keys": "k\ud800"}, "keys"),
        ]:  # fmt: skip
            text = _lines(HEADER, line).replace('"NaN"', "NaN").replace('"Infinity"', "Infinity")
            text = text.replace('"-Infinity"', "-Infinity")
            err = _json_error(c.post("/v1/namespaces/b/import", content=text, headers=NDJSON))
            assert err["lines"][0]["field"] == field, (line, err)
        assert snapshot(db_path) == before


def test_a_minimal_hand_written_import_works(db_path) -> None:
    """A header and an item line with only ``id`` and ``content`` was a 500 (the item's history sequence
    number was missing); now the item arrives with an ``IMPORT`` entry and behaves as any other."""
    with memory_server(db_path) as (url, _):
        c = client(url, ROOT)
        body = _lines(HEADER, {"kind": "item", "id": "i1", "content": "Alice moved to Lisbon"},
                      {"kind": "item", "id": "i2", "content": "Bob likes tea", "metadata": {"k": 1}})  # fmt: skip
        r = c.post("/v1/namespaces/hand/import", content=body, headers=NDJSON)
        assert r.status_code == 201 and r.json()["items"] == 2, r.text
        items = c.get("/v1/namespaces/hand/memories").json()["items"]
        assert [(i["id"], i["type"]) for i in items] == [("i1", "semantic"), ("i2", "semantic")]
        assert items[0]["created_at"] > 0
        hits = c.post("/v1/namespaces/hand/search", json={"query": "Lisbon"}).json()
        assert hits[0]["id"] == "i1"
        assert [e["op"] for e in c.get("/v1/namespaces/hand/memories/i1/history").json()] == ["IMPORT"]
        export = c.get("/v1/namespaces/hand/export").text
        assert c.post("/v1/namespaces/hand2/import", content=export, headers=NDJSON).status_code == 201
        assert c.post("/v1/namespaces/hand/memories/i1/undo").status_code == 200  # undoing the arrival
        assert c.get("/v1/namespaces/hand/memories/i1").status_code == 404


class BrokenEmbedder(Embedder):
    """A boundary that fails as a bug would (not a memrl error)."""

    name, dim = "broken", 8

    def embed(self, texts):
        raise RuntimeError("the embedding model crashed")


def test_a_bug_is_a_json_500(tmp_path) -> None:
    """500s were plain text, though the docs say every error is JSON."""
    memory = AsyncMemory(tmp_path / "m.db", embedder=BrokenEmbedder())
    with ServerThread(create_app(memory, Tokens())) as server:
        c = client(server.base_url, None)
        r = c.post("/v1/namespaces/a/memories", json={"content": "x"})
        assert r.status_code == 500 and r.headers["content-type"].startswith("application/json"), r.text
        assert r.json()["error"]["type"] == "server_error" and "crashed" not in r.text


async def test_mcp_tools_follow_the_same_rule(tmp_path) -> None:
    """The MCP tools (MemUpdate's, whose own annotations are looser) reach the same checks in the store: a
    refused value is an error result the model can read, and nothing is written."""
    pytest.importorskip("mcp", reason="the MCP tests need the 'mcp' extra: pip install 'memrl[mcp]'")
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    from memrl.memory.embedders.providers import HashingEmbedder
    from memrl.server.mcp_server import create_mcp, http_app

    db = tmp_path / "mcp.db"
    memory = AsyncMemory(db, embedder=HashingEmbedder(64))
    app = http_app(create_mcp(memory, "alice"), Tokens.parse(["a=mcp-secret-alice:alice"]), "alice")
    with ServerThread(app) as server:
        hc = create_mcp_http_client(headers={"Authorization": "Bearer mcp-secret-alice"})
        async with Client(streamable_http_client(server.base_url + "/mcp", http_client=hc)) as c:
            seed = await c.call_tool(
                "manage_memory", {"operation": "create", "content": "Alice lives in Lisbon"}
            )
            mid = seed.structured_content["data"]["id"]
            before = snapshot(db)
            for args in [
                {"operation": "create", "content": "x", "metadata": {"k": 2**70}},
                {"operation": "create", "content": "x", "metadata": {"k": "a\x00b"}},
                {"operation": "create", "content": "x", "metadata": {"vector_key": "0" * 64}},
                {"operation": "create", "content": "a\x00b"},
                {"operation": "update", "content": "y", "memory_id": mid, "metadata": {"dense": "no"}},
            ]:
                r = await c.call_tool("manage_memory", args)
                assert r.is_error and r.content[0].text, (args, r)
            assert snapshot(db) == before
