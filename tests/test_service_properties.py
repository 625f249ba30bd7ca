"""Property-based tests of the memory service on both back-ends (issue 33), over real HTTP: random writes
(adds, edits, deletes, restores, undos, clones, imports) built from hostile values (lone surrogates, NUL,
control characters, 9,000-letter words, integers past 64 bits, NaN and infinities, deep nesting, the keys
the store derives, reserved ids), each followed by the checks:

- no answer is a 500, and every error is the JSON error shape;
- a refused write changes nothing (every table, the embedding cache included);
- after an accepted write, list, history, search (every mode, with filters taken from stored metadata),
  export and re-import of both namespaces work, and the re-imported namespace holds the same items.

Runs in CI with the rest of the suite (a fixed, derandomized example budget per back-end)."""

from __future__ import annotations

import json
import random
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server_helpers import client, memory_server, snapshot

pytest.importorskip("fastapi", reason="the server tests need the 'serve' extra: pip install 'memrl[serve]'")

PROPS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
NS = ("p", "q")
IDS = ("m0", "m1", "m2", "__core__", "a/b")
_rng = random.Random(33)
LONG_WORD = "".join(_rng.choice(string.ascii_lowercase) for _ in range(9000))

# Any code point, surrogates included (JSON escapes them; UTF-8 cannot encode them).
_char = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())
_odd_text = st.sampled_from(["\ud800", "a\udfffb", "a\x00b", "\x00", "x\r\ny", "\x07", "李", "", " ", "null",
                             "2023-05-01", "Alice", LONG_WORD, f"word {LONG_WORD[:300]} end", "\u202e", "\ufeff"])  # fmt: skip
_text = st.one_of(
    st.text(_char, max_size=12), st.text(string.ascii_letters + " ", min_size=1, max_size=30), _odd_text
)
_number = st.one_of(st.integers(-(2**70), 2**70), st.sampled_from([2**63 - 1, -(2**63), 2**63, 0, -0.0, 1e308]),
                    st.floats(allow_nan=True, allow_infinity=True))  # fmt: skip
_scalar = st.one_of(st.none(), st.booleans(), _number, _text)
_json = st.recursive(_scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(_text, inner, max_size=3)),
                     max_leaves=8)  # fmt: skip
_derived = st.sampled_from(["vector_key", "dense", "text", "date", "unit", "speaker", "mentions_time", "k"])
_metadata = st.one_of(
    st.dictionaries(st.one_of(_derived, _text), _json, max_size=4),
    st.builds(lambda n: _nest(n), st.integers(15, 25)),
    st.sampled_from([{"vector_key": "v:" + "a" * 64}, {"dense": False}, {"text": "plain"}, {"k": [1, "x"]}]),
)
_content = st.one_of(
    _text, st.sampled_from(["Alice moved to Lisbon in May 2023", "Bob likes tea", LONG_WORD])
)


def _nest(depth: int) -> dict:
    out: dict = {"leaf": 1}
    for _ in range(depth):
        out = {"d": out}
    return out


_add = st.fixed_dictionaries(
    {"content": _content},
    optional={"metadata": _metadata, "evidence": st.lists(_text, max_size=3), "session": _text,
              "memory_id": st.sampled_from(IDS), "memory_type": st.sampled_from(["episodic", "semantic", "core"])},
)  # fmt: skip
_patch = st.fixed_dictionaries({}, optional={"content": _content, "metadata": _metadata,
                                             "evidence": st.lists(_text, max_size=2)})  # fmt: skip
_write = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(NS), _add),
    st.tuples(st.just("add"), st.sampled_from(NS), _add),
    st.tuples(st.just("patch"), st.sampled_from(NS), st.tuples(st.sampled_from(IDS), _patch)),
    st.tuples(st.sampled_from(["delete", "restore", "undo"]), st.sampled_from(NS), st.sampled_from([*IDS, None])),
    st.tuples(st.just("clone"), st.sampled_from(NS), st.tuples(st.sampled_from(NS), st.booleans())),
    st.tuples(st.just("import"), st.sampled_from(NS), st.tuples(st.sampled_from(NS), st.booleans(),
                                                                st.integers(0, 30), _json)),
)  # fmt: skip


def _check(r) -> None:
    assert r.status_code < 500, (r.request.method, r.request.url, r.status_code, r.text[:500])
    if r.status_code >= 400:
        assert r.headers["content-type"].startswith("application/json"), r.text[:300]
        body = r.json()
        assert set(body) == {"error"} and body["error"]["message"], body


def _send(c, kind: str, ns: str, arg):
    base = f"/v1/namespaces/{ns}"
    raw = {"content-type": "application/json"}
    if kind == "add":
        return c.post(f"{base}/memories", content=json.dumps(arg).encode(), headers=raw)
    if kind == "patch":
        mid, body = arg
        return c.patch(f"{base}/memories/{mid}", content=json.dumps(body).encode(), headers=raw)
    if kind in ("delete", "restore", "undo") and arg is None:
        return c.post(f"{base}/undo") if kind == "undo" else c.get(f"{base}/memories/nope")
    if kind == "delete":
        return c.delete(f"{base}/memories/{arg}")
    if kind in ("restore", "undo"):
        return c.post(f"{base}/memories/{arg}/{kind}")
    if kind == "clone":
        target, overwrite = arg
        return c.post(f"{base}/clone", json={"target": target, "overwrite": overwrite})
    target, overwrite, where, value = arg  # import: an export of ns with one value replaced
    lines = [json.loads(x) for x in c.get(f"{base}/export").text.splitlines()] if _exists(c, ns) else []
    if not lines:
        lines = [{"kind": "header", "format": "memrl-export", "version": 1, "namespace": ns}]
    lines.append({"kind": "item", "id": f"i{where}", "content": "imported text"})
    line = lines[where % len(lines)]
    field = sorted(line)[where % len(line)]
    if field != "kind":
        line[field] = value
    body = "\n".join(json.dumps(x) for x in lines).encode()
    return c.post(f"/v1/namespaces/{target}/import", params={"overwrite": overwrite}, content=body,
                  headers={"content-type": "application/x-ndjson"})  # fmt: skip


def _pct(text: str) -> str:
    from urllib.parse import quote

    return quote(text.encode("utf-8", "surrogatepass"), safe="")


def _exists(c, ns: str) -> bool:
    return any(n["name"] == ns for n in c.get("/v1/namespaces").json())


def _items(c, ns: str) -> list[tuple]:
    r = c.get(f"/v1/namespaces/{ns}/memories", params={"include_deleted": True, "limit": 1000})
    _check(r)
    assert r.status_code == 200
    return [(i["id"], i["type"], i["content"], json.dumps(i["metadata"], sort_keys=True), i["deleted"])
            for i in r.json()["items"]]  # fmt: skip


def _everything_still_works(c) -> None:
    for ns in NS:
        if not _exists(c, ns):
            continue
        items = _items(c, ns)
        r = c.get(f"/v1/namespaces/{ns}/history")
        assert r.status_code == 200, r.text[:300]
        live = [i for i in items if not i[4]]
        words = [w for i in live for w in i[2].split()[:2]][:3] or ["Alice"]
        filters = [{}]
        for i in live[:2]:
            meta = json.loads(i[3])
            filters += [
                {k: v} for k, v in list(meta.items())[:2] if v is None or isinstance(v, (str, int, float))
            ]
        for query in words:
            for mode in ("hybrid", "dense", "bm25"):
                for f in filters:
                    r = c.post(f"/v1/namespaces/{ns}/search", json={"query": query[:300], "mode": mode,
                                                                    "filters": f or None})  # fmt: skip
                    _check(r)
                    assert r.status_code == 200 or (r.status_code == 422 and "query" in r.text), r.text[:300]
        export = c.get(f"/v1/namespaces/{ns}/export")
        assert export.status_code == 200
        r = c.post("/v1/namespaces/re/import", params={"overwrite": True}, content=export.content,
                   headers={"content-type": "application/x-ndjson"})  # fmt: skip
        assert r.status_code == 201, r.text[:500]
        assert _items(c, "re") == items


@pytest.fixture
def service(db_path):
    with memory_server(db_path, tokens=[]) as (url, _):
        yield client(url, None), db_path


@PROPS
@given(writes=st.lists(_write, min_size=1, max_size=3))
def test_random_writes_keep_the_store_whole(service, writes) -> None:
    c, db = service
    for kind, ns, arg in writes:
        before = snapshot(db)
        r = _send(c, kind, ns, arg)
        _check(r)
        if r.status_code >= 400:
            assert snapshot(db) == before, (kind, ns, arg, r.status_code, r.text[:300])
        else:
            _everything_still_works(c)


_read = st.one_of(
    st.tuples(st.just("search"), st.sampled_from(NS), st.fixed_dictionaries(
        {"query": _text}, optional={"filters": st.one_of(_json, st.dictionaries(st.one_of(_derived, _text), _json,
                                                                                  max_size=3)),
                                    "top_k": st.one_of(_number, _text), "mode": st.sampled_from(["hybrid", "dense",
                                    "bm25", "fuzzy"]), "threshold": _number, "types": _json})),
    st.tuples(st.sampled_from(["get", "history"]), st.sampled_from(NS), st.one_of(st.sampled_from(IDS), _text)),
    st.tuples(st.just("list"), st.sampled_from(NS), st.dictionaries(st.sampled_from(["limit", "offset", "types",
                                                                                     "include_deleted"]),
                                                                   st.one_of(_text, _number), max_size=2)),
)  # fmt: skip


@PROPS
@given(writes=st.lists(_write, min_size=1, max_size=2), reads=st.lists(_read, min_size=1, max_size=4))
def test_random_reads_never_fail_and_change_nothing(service, writes, reads) -> None:
    c, db = service
    for kind, ns, arg in writes:
        _check(_send(c, kind, ns, arg))

    def state() -> list[
        tuple
    ]:  # a search may fill the namespace's embedding cache: everything else must stay
        return [row for row in snapshot(db) if row[0] != "embeddings"]

    before = state()
    for kind, ns, arg in reads:
        base = f"/v1/namespaces/{ns}"
        if kind == "search":
            r = c.post(
                f"{base}/search",
                content=json.dumps(arg).encode(),
                headers={"content-type": "application/json"},
            )
        elif (
            kind == "list"
        ):  # percent-encoded by hand: a lone surrogate goes out as the bytes UTF-8 would use
            query = "&".join(
                f"{k}={_pct(v if isinstance(v, str) else json.dumps(v))}" for k, v in arg.items()
            )
            r = c.get(f"{base}/memories?{query}")

        else:
            mid = _pct(arg) or "%20"
            r = c.get(f"{base}/memories/{mid}" + ("/history" if kind == "history" else ""))
        _check(r)
    assert state() == before
