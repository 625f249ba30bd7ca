"""Imports with bounded memory and time per line, and one client's import not stalling the others (issue 33):
a line without a newline is refused as soon as it passes the line limit instead of being re-buffered on every
chunk; lines split anywhere parse the same; ``/health`` and other namespaces' searches answer quickly while
a large import is parsed and written (off the event loop, on SQLite and Postgres); on SQLite a read does not
wait for another thread's long write, and a write waits at most ``busy_timeout``."""

from __future__ import annotations

import json
import threading
import time
import tracemalloc

import pytest

from tests.server_helpers import client, memory_server

pytest.importorskip("fastapi", reason="the server tests need the 'serve' extra: pip install 'memrl[serve]'")

from memrl.errors import BusyError  # noqa: E402
from memrl.memory.backends.sqlite.store import SQLiteStore  # noqa: E402
from memrl.memory.store.base import NewItem  # noqa: E402
from memrl.memory.store.transfer import ImportReader  # noqa: E402

NDJSON = {"content-type": "application/x-ndjson"}


def _export(n: int, words: int = 12) -> list[dict]:
    lines = [{"kind": "header", "format": "memrl-export", "version": 1, "namespace": "big"}]
    for i in range(n):
        item = {"id": f"i{i}", "type": "semantic", "content": f"item {i} " + " ".join(f"w{(i * 7 + j) % 997}" for j in
                range(words)), "metadata": {}, "evidence": [], "session": None, "created_at": 1.0, "updated_at": 1.0,
                "deleted": False}  # fmt: skip
        lines.append({"kind": "item", **item, "seq": i + 1})
        lines.append({"kind": "history", "seq": i + 1, "memory_id": f"i{i}", "op": "ADD", "old": None, "new": item,
                      "at": 1.0})  # fmt: skip
    return lines


def test_a_line_without_newline_is_refused_as_it_arrives(tmp_path) -> None:
    """One 128 MB line took 22.6 s and 309 MB of server memory: every chunk re-copied the whole partial line.
    Now each byte is looked at once and the line is dropped past the limit."""
    store = SQLiteStore(tmp_path / "m.db")
    reader = ImportReader(store)
    chunk = b"x" * 65536
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        for _ in range(24 * 16):  # 24 MB, no newline
            reader.feed_bytes(chunk)
        reader.feed_bytes(b"\n")
        elapsed = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        reader.close()
        store.close()
    assert reader.errors and "longer than" in reader.errors[0]["message"], reader.errors
    assert peak < ImportReader.max_line_bytes + (4 << 20), (
        peak
    )  # the limit plus a chunk or two, not 2 x 24 MB
    assert elapsed < 2.0, elapsed


def test_lines_split_anywhere_parse_the_same(tmp_path) -> None:
    body = ("\n".join(json.dumps(x) for x in _export(5)) + "\n").encode()
    results = []
    for size in (1, 7, 4096, len(body)):
        store = SQLiteStore(tmp_path / f"m{size}.db")
        reader = ImportReader(store)
        try:
            for i in range(0, len(body), size):
                reader.feed_bytes(body[i : i + size])
            results.append(reader.write("copy"))
            results[-1].pop("namespace")
        finally:
            reader.close()
            store.close()
    assert all(r == results[0] for r in results) and results[0]["items"] == 5, results


def test_an_import_line_too_long_gets_a_clear_422_over_http(tmp_path) -> None:
    with memory_server(tmp_path / "m.db", tokens=[]) as (url, _):
        c = client(url, None)
        r = c.post(
            "/v1/namespaces/a/import", content=b'{"kind": "header"' + b" " * (10 << 20) + b"}", headers=NDJSON
        )
        assert r.status_code == 422 and "longer than" in r.json()["error"]["message"], r.text[:300]
        assert c.get("/v1/namespaces").json() == []


def test_health_and_other_searches_answer_during_a_large_import(db_path) -> None:
    """A 22 MB import on Postgres stalled ``/health`` for 5.9 s (parsing and the one write transaction ran
    on the event loop). Here a ~6 MB import, during which /health and a search of another namespace are
    polled."""
    body = ("\n".join(json.dumps(x) for x in _export(1500, words=300)) + "\n").encode()
    with memory_server(db_path, tokens=[]) as (url, _):
        c = client(url, None)
        c.post("/v1/namespaces/other/memories", json={"content": "Alice lives in Lisbon"})
        c.post("/v1/namespaces/other/search", json={"query": "Lisbon"})
        done, result = threading.Event(), {}

        def run() -> None:
            t0 = time.perf_counter()
            result["r"] = client(url, None).post("/v1/namespaces/big/import", content=body, headers=NDJSON)
            result["s"] = time.perf_counter() - t0
            done.set()

        worker = threading.Thread(target=run)
        worker.start()
        health, search = [], []
        while not done.is_set():
            t0 = time.perf_counter()
            assert c.get("/health").status_code == 200
            health.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            assert c.post("/v1/namespaces/other/search", json={"query": "Lisbon"}).status_code == 200
            search.append(time.perf_counter() - t0)
            time.sleep(0.02)
        worker.join()
    assert result["r"].status_code == 201 and result["r"].json()["items"] == 1500, result["r"].text
    assert max(health) < 0.5 and max(search) < 1.0, (result["s"], max(health), max(search), len(health))


def test_sqlite_reads_do_not_wait_for_a_long_write_and_writes_wait_at_most_busy_timeout(tmp_path) -> None:
    store = SQLiteStore(tmp_path / "m.db", busy_timeout=0.3)
    store.insert([NewItem("seed")], "a")
    holding, release = threading.Event(), threading.Event()

    def long_write() -> None:  # as an import's one transaction
        with store.transaction("b"):
            store.insert([NewItem("being imported")], "b")
            holding.set()
            release.wait(10)

    writer = threading.Thread(target=long_write)
    writer.start()
    try:
        assert holding.wait(10)
        t0 = time.perf_counter()
        assert [i.content for i in store.list("a")] == ["seed"]
        assert store.list("b") == []  # the last committed state
        assert time.perf_counter() - t0 < 0.2
        t0 = time.perf_counter()
        with pytest.raises(BusyError, match="busy"):
            store.insert([NewItem("meanwhile")], "a")
        assert 0.25 < time.perf_counter() - t0 < 2.0
    finally:
        release.set()
        writer.join()
    assert [i.content for i in store.list("b")] == ["being imported"]
    store.insert([NewItem("after")], "a")
    store.close()


def test_file_imports_read_in_chunks_with_the_same_line_limit(tmp_path, capsys) -> None:
    """``memrl memory import`` and ``read_jsonl`` read the file as text lines: one 20 MB line was held whole."""
    from memrl.cli.main import main
    from memrl.memory.store.transfer import ImportRefused, read_jsonl

    big = tmp_path / "one-line.jsonl"
    big.write_bytes(b'{"kind": "header"' + b" " * (20 << 20))
    store = SQLiteStore(tmp_path / "m.db")
    tracemalloc.start()
    try:
        with pytest.raises(ImportRefused, match="longer than"):
            read_jsonl(store, big, namespace="x")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        store.close()
    assert peak < ImportReader.max_line_bytes + (4 << 20), peak
    assert main(["memory", "import", str(big), "--db", str(tmp_path / "m.db"), "--into", "x"]) == 2
    assert "longer than" in capsys.readouterr().err
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(json.dumps(_export(1)[0]).encode() + b"\n\xff\xfe\n")
    assert main(["memory", "import", str(bad), "--db", str(tmp_path / "m.db"), "--into", "x"]) == 2
    assert "not UTF-8" in capsys.readouterr().err
