"""Property-based fuzzing of the memory service over real HTTP (hypothesis, a fixed example budget): random
requests to every REST route with random JSON (or non-JSON) bodies, query strings and odd path segments,
and random import files made of mutated export lines. Properties: no 500, no dropped connection, every
answer is JSON (the error shape for 4xx), and a refused request leaves the database exactly as it was."""

from __future__ import annotations

import copy
import json
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server_helpers import client, memory_server, snapshot

pytest.importorskip("fastapi", reason="the server tests need the 'serve' extra: pip install 'memrl[serve]'")

import httpx  # noqa: E402

FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip

_text = st.text(st.characters(codec="utf-8"), max_size=30)
_odd = st.sampled_from(
    ["", " ", "a\r\nb", "\x00", "李", "a/b", "../x", "%2F", "x" * 300, '"', "\\", "null", "-1"]
)
#: Values that broke the old server (a history snapshot of 5, "no" as a flag, ints past 64 bits, ...).
_nasty = st.sampled_from([5, "no", 2**64, -1, 0, "", [], {}, None, "x" * 20_001, ["a", 5], {"a": {"b": [1]}}])
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                    st.floats(allow_nan=False, allow_infinity=False), _text, _odd, _nasty)  # fmt: skip
_json = st.recursive(_scalar, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(st.one_of(_text, _odd), inner, max_size=4)),
                     max_leaves=12)  # fmt: skip
_fields = ["content", "memory_type", "metadata", "evidence", "session", "memory_id", "query", "top_k", "mode",
           "types", "filters", "threshold", "limit", "offset", "include_deleted", "reason", "target", "overwrite"]  # fmt: skip
_body = st.one_of(
    st.dictionaries(st.sampled_from(_fields), _json, max_size=5),
    _json,
    st.binary(max_size=60),
)
_segment = st.one_of(
    st.sampled_from(["alice", "m1", "bob", "nope"]), _odd, _text.filter(lambda s: "/" not in s)
)

ROUTES = [
    ("GET", "/v1/namespaces"),
    ("POST", "/v1/namespaces/{ns}/memories"),
    ("GET", "/v1/namespaces/{ns}/memories"),
    ("POST", "/v1/namespaces/{ns}/search"),
    ("GET", "/v1/namespaces/{ns}/memories/{id}"),
    ("PATCH", "/v1/namespaces/{ns}/memories/{id}"),
    ("DELETE", "/v1/namespaces/{ns}/memories/{id}"),
    ("POST", "/v1/namespaces/{ns}/memories/{id}/restore"),
    ("GET", "/v1/namespaces/{ns}/memories/{id}/history"),
    ("POST", "/v1/namespaces/{ns}/memories/{id}/undo"),
    ("GET", "/v1/namespaces/{ns}/history"),
    ("POST", "/v1/namespaces/{ns}/undo"),
    ("POST", "/v1/namespaces/{ns}/clone"),
    ("GET", "/v1/namespaces/{ns}/core"),
    ("GET", "/v1/namespaces/{ns}/export"),
    ("POST", "/v1/namespaces/{ns}/import"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    db = tmp_path_factory.mktemp("fuzz") / "m.db"
    with memory_server(db, tokens=[]) as (url, _):
        c = client(url, None)
        assert c.post("/v1/namespaces/alice/memories", json={"content": "Alice lives in Lisbon", "memory_id": "m1",
                      "metadata": {"speaker": "Alice"}, "evidence": ["D1:3"]}).status_code == 201  # fmt: skip
        c.patch("/v1/namespaces/alice/memories/m1", json={"content": "Alice lives in Porto"})
        export = [json.loads(x) for x in c.get("/v1/namespaces/alice/export").text.splitlines()]
        yield url, db, c, export


def _check(r: httpx.Response) -> None:
    assert r.status_code < 500, (r.status_code, r.text)
    body = r.json() if r.headers.get("content-type", "").startswith("application/json") else None
    if r.status_code >= 400:
        assert body is not None and set(body) == {"error"} and body["error"]["message"], r.text


@FUZZ
@given(
    route=st.sampled_from(ROUTES),
    ns=_segment,
    mid=_segment,
    body=_body,
    params=st.dictionaries(
        st.sampled_from(["offset", "limit", "include_deleted", "reason", "overwrite", "memory_id", "types"]),
        st.one_of(st.sampled_from(["0", "-1", "10", str(2**63), str(10**30), "true", "no", ""]), _text, _odd),
        max_size=3,
    ),
    ctype=st.sampled_from(["application/json", "text/plain", "application/x-ndjson", None]),
)
def test_random_requests_never_500_and_refusals_change_nothing(server, route, ns, mid, body, params, ctype):
    url, db, c, _ = server
    method, template = route
    path = template.format(ns=quote(ns, safe="") or "%20", id=quote(mid, safe="") or "%20")
    content = body if isinstance(body, bytes) else json.dumps(body, ensure_ascii=False).encode()
    headers = {"content-type": ctype} if ctype and method != "GET" else {}
    # the namespace exists (when its name is acceptable): exports, clones and imports of odd names get exercised
    _check(c.post(f"/v1/namespaces/{quote(ns, safe='') or '%20'}/memories", json={"content": "seed"}))
    before = snapshot(db)
    try:
        r = c.request(
            method, path, params=params, content=content if method != "GET" else None, headers=headers
        )
    except httpx.TransportError as e:  # a dropped connection
        pytest.fail(f"{method} {path}: connection dropped ({e!r})")
    _check(r)
    if r.status_code >= 400:
        assert snapshot(db) == before, (method, path, r.status_code, r.text)


_mutation = st.tuples(
    st.integers(0, 50),  # which line
    st.sampled_from(["drop_field", "set_field", "replace_line", "duplicate", "truncate", "swap_kind"]),
    st.sampled_from(
        [
            "kind",
            "id",
            "content",
            "type",
            "deleted",
            "evidence",
            "metadata",
            "seq",
            "memory_id",
            "old",
            "new",
            "undone",
            "at",
            "format",
            "version",
            "namespace",
            "keys",
            "char_limit",
        ]
    ),
    _json,
)


@FUZZ
@given(mutations=st.lists(_mutation, min_size=1, max_size=3), target=st.sampled_from(["alice", "fresh"]))
def test_random_import_files_never_500_and_refusals_change_nothing(server, mutations, target):
    url, db, c, export = server
    lines: list = copy.deepcopy(export)
    for at, op, field, value in mutations:
        i = at % len(lines)
        line = lines[i]
        if op == "drop_field" and isinstance(line, dict):
            line.pop(field, None)
        elif op == "set_field" and isinstance(line, dict):
            line[field] = value
        elif op == "replace_line":
            lines[i] = value
        elif op == "duplicate":
            lines.insert(i, copy.deepcopy(line))
        elif op == "swap_kind" and isinstance(line, dict):
            line["kind"] = value if isinstance(value, str) else "item"
    text = "\n".join(json.dumps(x, ensure_ascii=False) for x in lines)
    if any(op == "truncate" for _, op, _, _ in mutations):
        text = text[: len(text) // 2]
    before = snapshot(db)
    try:
        r = c.post(f"/v1/namespaces/{target}/import", params={"overwrite": "true"}, content=text.encode(),
                   headers={"content-type": "application/x-ndjson"})  # fmt: skip
    except httpx.TransportError as e:
        pytest.fail(f"import: connection dropped ({e!r})")
    _check(r)
    if r.status_code >= 400:
        assert snapshot(db) == before, r.text
        if r.status_code == 422:
            assert all(isinstance(x["line"], int) for x in r.json()["error"].get("lines", [])), r.text
    elif target == "alice":  # accepted over alice: alice must still work (undo, search, export)
        assert c.get("/v1/namespaces/alice/export").status_code == 200
        _check(c.post("/v1/namespaces/alice/search", json={"query": "Alice"}))
        _check(c.post("/v1/namespaces/alice/undo"))
    if r.status_code < 400 or target == "alice":
        # put alice back as it was, for the next example
        restore = "\n".join(json.dumps(x) for x in export)
        assert c.post("/v1/namespaces/alice/import", params={"overwrite": "true"}, content=restore.encode(),
                      headers={"content-type": "application/x-ndjson"}).status_code == 201  # fmt: skip
