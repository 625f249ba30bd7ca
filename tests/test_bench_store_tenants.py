"""bench/store.py --tenants: items spread over namespaces, each query searched in its target's namespace;
on both back-ends the figures come from real stores (a tenant's hits are its own, dense equals exact)."""

from __future__ import annotations

import asyncio
import json

import pytest

from bench import store as store_bench
from bench.store_data import make_corpus
from bench.store_tenants import bench_tenants


def _check(out: dict, n: int, namespaces: int) -> None:
    assert out["n"] == n and out["namespaces"] == namespaces and out["insert_per_s"] > 0
    assert out["hits_from_other_namespaces"] == 0  # a tenant's hits are its own
    # each query's vector lies near its target's: dense finds it in the target's namespace
    assert out["dense"]["hit_at_k"] == 1.0 and out["hybrid"]["hit_at_k"] >= 0.75
    for m in ("dense", "hybrid", "bm25"):
        assert out[m]["p50_ms"] > 0 and out[m]["p99_ms"] >= out[m]["p50_ms"]
    assert out["cold_dense_ms"] > 0 and out["cold_hybrid_ms"] > 0


def test_tenants_on_sqlite_and_their_items(tmp_path):
    from memrl.memory.facade.memory import AsyncMemory

    corpus = make_corpus(0, 600, 20_000)
    db = str(tmp_path / "t.db")
    out = asyncio.run(bench_tenants(db, corpus, 600, 20, queries=12, top_k=5, batch=7, seed=0))
    _check(out, 600, 20)

    async def counts() -> dict[str, int]:
        mem = AsyncMemory(db, embedder="hashing")
        try:
            return {n["name"]: n["items"] for n in await mem.namespaces()}
        finally:
            await mem.close()

    assert asyncio.run(counts()) == {f"t{j}": 30 for j in range(20)}


def test_tenants_on_postgres(pg_server):
    from tests.test_postgres import fresh

    corpus = make_corpus(0, 300, 20_000)
    out = asyncio.run(bench_tenants(fresh(pg_server), corpus, 300, 10, queries=8, top_k=5, batch=50, seed=0))
    _check(out, 300, 10)


def test_the_cli_reports_tenants_in_its_json_line(capsys):
    store_bench.main(["--sizes", "400", "--tenants", "8", "--backends", "sqlite", "--no-locomo", "--writers",
                      "1", "--writer-items", "20", "--queries", "6", "--warmup", "1", "--langgraph-sizes", ""])  # fmt: skip
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    _check(last["backends"]["sqlite"]["tenants"], 400, 8)
    with pytest.raises(SystemExit):  # 400 items over 200 namespaces leave 2 a namespace, fewer than top-k
        store_bench.parse_args(["--sizes", "400", "--tenants", "200"])


def test_tenants_only_runs_that_phase_alone(capsys):
    store_bench.main(["--sizes", "400", "--tenants", "8", "--tenants-only", "--backends", "sqlite",
                      "--queries", "6", "--warmup", "1", "--langgraph-sizes", ""])  # fmt: skip
    sqlite = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["backends"]["sqlite"]
    assert set(sqlite) == {"tenants"}  # no single-namespace sizes, writers or LoCoMo in this process
    t = sqlite["tenants"]
    _check(t, 400, 8)
    assert t["own_process"] is True
    assert 0 < t["rss_mb_after_data"]["now"] <= t["rss_mb"]["peak"]
    for bad in (["--tenants-only"], ["--tenants", "8", "--tenants-only", "--plot", "x.png"]):
        with pytest.raises(SystemExit):
            store_bench.parse_args(["--sizes", "400", *bad])


def test_the_plot_draws_each_modes_p50_by_size(capsys, tmp_path):
    from bench.store_report import plot_latency

    png = tmp_path / "latency.png"
    store_bench.main(["--sizes", "200,400", "--backends", "sqlite", "--no-locomo", "--writers", "", "--queries",
                      "6", "--warmup", "1", "--langgraph-sizes", "", "--plot", str(png)])  # fmt: skip
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["backends"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = plot_latency(out, tmp_path / "again.png")
    rows = out["sqlite"]["per_size"]
    assert set(lines) == {"sqlite dense", "sqlite hybrid", "sqlite bm25", "numpy brute force"}
    assert lines["sqlite hybrid"] == [(r["n"], r["hybrid"]["p50_ms"]) for r in rows]
    assert [n for n, _ in lines["numpy brute force"]] == [200, 400]
    for r in rows:  # resident memory, as the JSON carries it per size, and with the data alone
        assert 0 < r["rss_mb"]["now"] <= r["rss_mb"]["peak"]
        assert 0 < out["sqlite"]["rss_mb_after_data"]["now"] <= r["rss_mb"]["peak"]


def test_runs_merge_per_back_end_and_a_size_measured_twice_is_refused(tmp_path):
    from bench.store_report import merge_runs

    def run(path, sizes):
        rows = [{"n": n, "dense": {"p50_ms": n / 1000}} for n in sizes]
        path.write_text("a table first\n" + json.dumps({"backends": {"sqlite": {"per_size": rows}}}) + "\n")
        return path

    a, b = run(tmp_path / "a.out", [10, 100]), run(tmp_path / "b.out", [1000])
    merged = merge_runs([a, b])
    assert [r["n"] for r in merged["sqlite"]["per_size"]] == [10, 100, 1000]
    with pytest.raises(SystemExit, match="n=100 is also in an earlier file"):
        merge_runs([a, run(tmp_path / "c.out", [100])])
    (tmp_path / "bad.out").write_text("no json here\n")
    with pytest.raises(SystemExit, match="bad.out: its last line is not"):
        merge_runs([tmp_path / "bad.out"])


def test_the_postgres_servers_memory_is_measured_on_this_machine_only(pg_server):
    from bench.store_data import server_memory_mb
    from memrl.memory.backends.postgres.local import free_port

    pss = server_memory_mb(pg_server.url())
    assert pss is not None and pss > 1  # the postmaster and its background workers
    assert server_memory_mb(f"postgresql://x@127.0.0.1:{free_port()}/db") is None  # nobody listens there
