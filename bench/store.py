"""Benchmark of the memory store's search and insert, against raw numpy and LangGraph's InMemoryStore.

What it measures, at each size n (default 1k, 10k, 100k items of 384-d embeddings):

- latency (p50/p95 ms) of ``AsyncMemory.search`` in ``mode="dense"`` (exact brute force over the cached
  matrix), ``"hybrid"`` (dense + BM25 fused by RRF) and ``"bm25"`` (the namespace's BM25 index alone), each awaited the way
  a user calls it;
- raw numpy brute force (``matrix @ q`` + ``argpartition``): the floor for exact search. It scans the store's
  own matrix (same memory: on a VM two copies of one matrix can differ 1.5x in speed with the pages backing
  them), so ``dense_vs_numpy`` is memrl's overhead alone; ``einsum`` is the same without BLAS threads;
- LangGraph's ``InMemoryStore`` (the store LangMem and MemUpdate use) with the same vectors, at 10k only by
  default (``--langgraph-sizes``), because it converts every stored vector to numpy on every query;
- the cold loads: ``bm25_cold_ms``, the first BM25 search after the namespace's BM25 index is dropped
  (every text tokenized and indexed, as in a fresh process); ``dense_cold_ms``, the first dense search
  after ``index.forget``, which reads every
  vector back from SQLite and builds the matrix, as when a process opens an existing database;
- insert throughput of ``add_many`` in batches, including the history log and the
  embedding-cache writes. Embeddings are precomputed, so the embedder's own cost is *excluded*.

Correctness: the store's dense top-k must equal numpy's (``dense_recall_vs_numpy``, expected 1.0); LangGraph's
top-k is checked against numpy too. ``hit_at_k`` is the share of queries whose target item is in the top-k.

Data (deterministic, seeded; item i is the same whatever the sizes): texts of 5-20 words drawn from a
Zipf-distributed vocabulary of real English function words followed by ~20k synthetic content words (so
BM25 sees realistic posting lists, including common words the store does not drop as stopwords), with 1-3
"topic" words shared by the items of a cluster; vectors are unit vectors around 1,000 Gaussian cluster
centres, so nearest neighbours mean something. Each query is a few words of a target item plus common
words, and a vector near the target's. Vectors reach the store through :class:`LookupEmbedder` and every
search passes ``query_vector=``, so no embedding cost is timed anywhere. Each size adds items to the same
database (file-backed in a temp dir, as by default; ``--db :memory:`` for an in-memory one). Methods take
turns query by query, so background load hits them alike. On a busy machine expect large noise (BLAS
threads waiting for a core): the JSON records the load average before and after.

Run::

    .venv/bin/python -m bench.store              # full: 1k, 10k, 100k (a few minutes, mostly the 100k insert)
    .venv/bin/python -m bench.store --quick      # smoke run: 1k and 10k, 50 queries
    .venv/bin/python -m bench.store --sizes 1000,10000,100000 --queries 200 --top-k 10 --langgraph-sizes 10000
    .venv/bin/python -m bench.store --langgraph-sizes ""   # skip InMemoryStore
    # ANN at scale (issue 38; not run in a development session: about an hour, 2 GB+ of RAM): each JSON
    # line's "ann" list has, per size, the build time, recall@k against the exact path, dense p50/p99 with
    # and without the graph, and the cold first query (the graph loaded from its file)
    flock /work/cpu.lock nice -n 10 .venv/bin/python -m bench.store --sizes 10000,100000,1000000 \
        --langgraph-sizes "" --queries 200
    # many tenants (issue 38): the largest size also spread over 1,000 namespaces, searched one at a time
    flock /work/cpu.lock .venv/bin/python -m bench.store --sizes 1000000 --tenants 1000 --langgraph-sizes ""
    # the same phase alone in its process (its resident memory is then its own): add --tenants-only
    .venv/bin/python -m bench.store --profile    # at the largest size, also: cProfile of the cold load and of
                                                 # hybrid/bm25 search, db size by table

A table is printed as it goes; the last line of stdout is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.store_data import (
    DIM,
    NAMESPACE,
    TYPES,
    Corpus,
    LookupEmbedder,
    Queries,
    item_index,
    load_avg,
    machine,
    make_corpus,
    make_queries,
    numpy_top,
    overlap,
    resident_mb,
    server_memory_mb,
    stats,
)  # fmt: skip
from bench.store_report import print_size, profile_search, summary
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.store.base import NewItem


async def insert(mem: AsyncMemory, corpus: Corpus, start: int, end: int, batch: int) -> float:
    """Add items [start, end) through ``add_many``; returns the seconds taken."""
    t0 = time.perf_counter()
    for b in range(start, end, batch):
        items = [
            NewItem(corpus.texts[i], type=TYPES[i % 3], session=f"s{i // 20}", id=f"m{i}")
            for i in range(b, min(end, b + batch))
        ]
        await mem.add_many(items, namespace=NAMESPACE)
    return time.perf_counter() - t0


async def build_ann(mem: AsyncMemory) -> float | None:
    """Seconds to build the namespace's ANN graph (SQLite) or HNSW index (Postgres) from scratch, when its
    size calls for one; the graph is saved, so the cold search after it loads it as a new process would."""
    idx = await mem.index.sync(NAMESPACE)
    t0 = time.perf_counter()
    if hasattr(idx, "hnsw_dim"):
        if not idx.hnsw_dim:
            return None
        name = mem.store.hnsw_name(NAMESPACE, mem.embedder.name)
        with mem.store.pool.connection() as c:
            c.execute(f'DROP INDEX IF EXISTS "{name}"')
        t0 = time.perf_counter()
        mem.store.ensure_hnsw(NAMESPACE, mem.embedder.name, mem.embedder.dim)
    else:
        if idx.ann is None:
            return None
        idx.ann = None
        path = mem.index.graphs.path(NAMESPACE)
        if path is not None and path.exists():
            path.unlink()
        t0 = time.perf_counter()
        await mem.index.graphs.follow(NAMESPACE, idx)
    return round(time.perf_counter() - t0, 2)


async def bench_store(
    mem: AsyncMemory, qs: Queries, n: int, top_k: int, warmup: int, corpus_vectors: np.ndarray
) -> tuple[dict[str, Any], np.ndarray]:
    """Time numpy (matmul and einsum), dense, hybrid and bm25 search on the same queries; returns figures
    and numpy's top-k (item indices).

    Methods take turns query by query, in an order that rotates, so background load hits them alike (on a
    busy machine it comes and goes within a second; blocks of queries per method were skewed by it 30x).
    """
    ann_build_s = await build_ann(mem)
    mem.index.forget(NAMESPACE)  # measure the full build, as a fresh process opening this database would
    t0 = time.perf_counter()
    await mem.search(qs.texts[0], namespace=NAMESPACE, top_k=top_k, mode="dense", query_vector=qs.vectors[0])
    cold_ms = (time.perf_counter() - t0) * 1e3
    mem.index.lexical.forget(NAMESPACE)  # the BM25 index of a fresh process: every text tokenized once
    t0 = time.perf_counter()
    await mem.search(qs.texts[0], namespace=NAMESPACE, top_k=top_k, mode="bm25")
    bm25_cold_ms = (time.perf_counter() - t0) * 1e3
    # numpy searches the store's own matrix: the same memory, so the ratio is memrl's overhead alone (on a
    # VM, two copies of one matrix can differ 1.5x in matmul speed with the pages backing them).
    dense = await mem.index.sync(NAMESPACE)
    item_of_rid = dict(mem.store.read("SELECT rid, id FROM memories WHERE namespace = ?", (NAMESPACE,)))
    if hasattr(dense, "matrix"):
        assert dense.n == n, f"the store holds {dense.n} vectors, expected {n}"
        matrix, row_rids = dense.matrix[: dense.n], dense.rids
    else:  # pgvector: the database holds the vectors; numpy scans the corpus' own (item i = row i)
        matrix = np.ascontiguousarray(corpus_vectors[:n])
        rid_of = {item_index(i): r for r, i in item_of_rid.items()}
        row_rids = np.array([rid_of[i] for i in range(n)], dtype=np.int64)

    def store(mode: str, **options: Any) -> Callable[[int], Awaitable[Any]]:
        async def run(i: int) -> Any:
            return await mem.search(
                qs.texts[i],
                namespace=NAMESPACE,
                top_k=top_k,
                mode=mode,
                query_vector=qs.vectors[i],
                **options,
            )

        return run

    async def numpy_run(i: int) -> Any:
        return numpy_top(matrix, qs.vectors[i], top_k)

    async def einsum_run(i: int) -> Any:
        return numpy_top(matrix, qs.vectors[i], top_k, einsum=True)

    def items(name: str, got: Any) -> list[int]:
        if name in ("numpy", "einsum"):
            return [item_index(item_of_rid[int(r)]) for r in row_rids[got]]
        return [item_index(h.item.id) for h in got]

    async def exact_run(i: int) -> Any:  # dense search without the ANN graph or index (the exact path)
        idx, backend = mem.index._indexes[NAMESPACE], mem.index.backend
        hnsw = getattr(idx, "hnsw_dim", 0)
        if hasattr(idx, "hnsw_dim"):
            idx.hnsw_dim = 0
        else:
            mem.index.backend = "numpy"
        try:
            return await store("dense")(i)
        finally:
            mem.index.backend = backend
            if hasattr(idx, "hnsw_dim"):
                idx.hnsw_dim = hnsw

    methods = {"numpy": numpy_run, "einsum": einsum_run, **{m: store(m) for m in ("dense", "hybrid", "bm25")}}
    methods["dense_exact"] = exact_run
    # the peer of the current hybrid defaults: without the date-fit prior and window view (issue 12, session 3)
    methods["hybrid_no_date_window"] = store("hybrid", date_fit=0.0, window=0.0)
    names = list(methods)
    for i in range(min(warmup, len(qs.texts))):
        for run in methods.values():
            await run(i)
    times: dict[str, list[float]] = {m: [] for m in names}
    results: dict[str, list[list[int]]] = {m: [] for m in names}
    gc.collect()
    for i in range(len(qs.texts)):
        for j in range(len(names)):
            name = names[(i + j) % len(names)]
            t = time.perf_counter()
            got = await methods[name](i)
            times[name].append((time.perf_counter() - t) * 1e3)
            results[name].append(items(name, got))
    ref = results["numpy"]
    out: dict[str, Any] = {"dense_cold_ms": round(cold_ms, 1), "bm25_cold_ms": round(bm25_cold_ms, 1)}
    out["ann_build_s"] = ann_build_s  # None: exact at this size (below the threshold)
    out["ann_recall_vs_exact"] = round(
        float(
            np.mean([overlap(a, e) for a, e in zip(results["dense"], results["dense_exact"], strict=True)])
        ),
        4,
    )
    for name in names:
        hits = [t in r for t, r in zip(qs.targets, results[name], strict=True)]
        out[name] = {**stats(times[name]), "hit_at_k": round(float(np.mean(hits)), 3)}
    for name in ("dense", "einsum"):
        recall = [overlap(d, r) for d, r in zip(results[name], ref, strict=True)]
        out[f"{name}_recall_vs_numpy"] = round(float(np.mean(recall)), 4)
    out["dense_vs_numpy"] = round(out["dense"]["p50_ms"] / out["numpy"]["p50_ms"], 2)
    return out, np.asarray(ref)


def bench_langgraph(
    corpus: Corpus, qs: Queries, n: int, top_k: int, count: int, ref: np.ndarray
) -> dict[str, Any]:
    """LangGraph InMemoryStore over the first ``n`` items; its embed function returns the precomputed vectors
    as lists of floats, as a LangChain ``Embeddings`` does."""
    from langgraph.store.base import PutOp
    from langgraph.store.memory import InMemoryStore

    lookup = dict(zip(corpus.texts[:n], corpus.vectors[:n].tolist(), strict=True))
    lookup.update(zip(qs.texts, qs.vectors.tolist(), strict=True))

    def embed(texts: list[str]) -> list[list[float]]:
        return [lookup[t] for t in texts]

    store = InMemoryStore(index={"dims": DIM, "embed": embed, "fields": ["text"]})
    ns = (NAMESPACE,)
    t0 = time.perf_counter()
    for b in range(0, n, 1000):
        store.batch([PutOp(ns, f"m{i}", {"text": corpus.texts[i]}) for i in range(b, min(n, b + 1000))])
    insert_s = time.perf_counter() - t0
    count = min(count, len(qs.texts))
    store.search(ns, query=qs.texts[0], limit=top_k)  # warm-up
    times, recall, hit = [], [], []
    gc.collect()
    for i in range(count):
        t = time.perf_counter()
        got = [item_index(r.key) for r in store.search(ns, query=qs.texts[i], limit=top_k)]
        times.append((time.perf_counter() - t) * 1e3)
        recall.append(overlap(got, ref[i].tolist()))
        hit.append(qs.targets[i] in got)
    return {
        **stats(times),
        "hit_at_k": round(float(np.mean(hit)), 3),
        "recall_vs_numpy": round(float(np.mean(recall)), 4),
        "queries": count,
        "insert_per_s": round(n / insert_s),
    }


def parse_sizes(text: str) -> list[int]:
    return sorted({int(float(s)) for s in text.split(",") if s.strip()})


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=parse_sizes, default=None, help="item counts (default 1000,10000,100000)")
    p.add_argument(
        "--queries", type=int, default=None, help="queries per size (default 200; 50 with --quick)"
    )
    p.add_argument("--top-k", type=int, default=10, help="results per search")
    p.add_argument(
        "--langgraph-sizes", type=parse_sizes, default=[10_000], help="sizes to run InMemoryStore at"
    )
    p.add_argument(
        "--langgraph-queries", type=int, default=100, help="queries for InMemoryStore (it is slow)"
    )
    p.add_argument("--batch", type=int, default=500, help="items per add_many call")
    p.add_argument(
        "--ann-min",
        type=int,
        default=None,
        help="vectors from which a namespace gets its ANN graph / HNSW index (default: the store's, 20000)",
    )
    p.add_argument(
        "--db", default=None, help="SQLite: database path, or :memory: (default: a file in a temp dir)"
    )
    p.add_argument(
        "--backends",
        type=lambda t: [b.strip() for b in t.split(",") if b.strip()],
        default=["sqlite", "postgres"],
        help="stores to run, side by side: sqlite, postgres (default both)",
    )
    p.add_argument(
        "--pg-url",
        default=None,
        help="a Postgres server to use (databases bench_* are created there; default: a throwaway local "
        "server from the postgres extra)",
    )
    p.add_argument(
        "--writers",
        type=parse_sizes,
        default=[1, 4, 16],
        help="concurrent writer process counts (default 1,4,16)",
    )
    p.add_argument("--writer-items", type=int, default=2400, help="items the writers add in all, per count")
    p.add_argument(
        "--tenants",
        type=int,
        default=0,
        help="also spread the largest size over this many namespaces and search one at a time "
        "(bench/store_tenants.py; default 0: skip)",
    )
    p.add_argument(
        "--tenants-only",
        action="store_true",
        help="run only the --tenants phase (no single-namespace sizes, writers or LoCoMo), so its memory "
        "figures are its own process's",
    )
    p.add_argument(
        "--no-locomo", dest="locomo", action="store_false", help="skip LoCoMo recall@10 (needs the data)"
    )
    p.add_argument("--warmup", type=int, default=10, help="untimed queries per method before timing")
    p.add_argument("--vocab", type=int, default=20_000, help="synthetic content words")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--dim", type=int, default=DIM, help="vector size (384 = MiniLM, 768 = the mpnet embedder)"
    )
    p.add_argument("--quick", action="store_true", help="smoke run: sizes 1000,10000 and 50 queries")
    p.add_argument("--plot", type=Path, help="also draw search p50 against size per back-end (a PNG)")
    p.add_argument(
        "--profile",
        action="store_true",
        help="at the largest size: cProfile, db size by table",
    )
    args = p.parse_args(argv)
    if args.sizes is None:
        args.sizes = [1000, 10_000] if args.quick else [1000, 10_000, 100_000]
    if args.queries is None:
        args.queries = 50 if args.quick else 200
    if args.quick:
        args.langgraph_queries = min(args.langgraph_queries, 50)
        args.writer_items = min(args.writer_items, 480)
    if not set(args.backends) <= {"sqlite", "postgres"} or not args.backends:
        p.error("--backends takes sqlite and/or postgres")
    if min(args.sizes) <= args.top_k:
        p.error(f"every size must exceed --top-k ({args.top_k})")
    if args.tenants < 0 or args.tenants > max(args.sizes) // (args.top_k + 1):
        p.error(f"--tenants must be 0 or leave every namespace more than --top-k ({args.top_k}) items")
    if args.tenants_only and not args.tenants:
        p.error("--tenants-only needs --tenants N")
    if args.tenants_only and args.plot:
        p.error("--plot draws the single-namespace sizes, which --tenants-only skips")
    if args.queries < 1 or args.batch < 1:
        p.error("--queries and --batch must be at least 1")
    if args.db not in (None, ":memory:") and Path(args.db).exists():
        p.error(f"{args.db} exists; pass a new path (the benchmark fills the database itself)")
    return args


async def run(args: argparse.Namespace, db: str) -> dict[str, Any]:
    t0, load_start = time.perf_counter(), load_avg()
    corpus = make_corpus(args.seed, max(args.sizes), args.vocab)
    data_rss = resident_mb()  # the corpus alone: what the per-size figures hold besides the store
    print(
        f"data: {len(corpus.texts):,} items x {DIM}-d in {time.perf_counter() - t0:.1f} s; "
        f"db {'in memory' if db == ':memory:' else db}",
        file=sys.stderr,
        flush=True,
    )
    skipped = [s for s in args.langgraph_sizes if s not in args.sizes]
    if skipped:
        print(f"langgraph sizes {skipped} are not in --sizes: skipped", file=sys.stderr)
    embedder = LookupEmbedder(corpus.texts, corpus.vectors, name=f"bench-lookup-{args.seed}")
    mem = AsyncMemory(db, embedder=embedder, namespace=NAMESPACE)
    if args.ann_min is not None:
        mem.index.ann_min = args.ann_min
    rows: list[dict[str, Any]] = []
    done, insert_s = 0, 0.0
    try:
        for n in args.sizes:
            seconds = await insert(mem, corpus, done, n, args.batch)
            insert_s += seconds
            row: dict[str, Any] = {
                "n": n,
                "insert_per_s": round((n - done) / seconds),
                "insert_s": round(seconds, 2),
            }
            done = n
            if db.startswith("postgresql://"):
                size = mem.store.read("SELECT pg_database_size(current_database())")[0][0]
            else:
                size = (
                    sum(p.stat().st_size for p in Path(db).parent.glob(Path(db).name + "*"))
                    if db != ":memory:"
                    else 0
                )
            row["db_mb"] = round(size / 2**20, 1) if size else None
            qs = make_queries(corpus, n, args.queries, args.seed)
            figures, ref = await bench_store(mem, qs, n, args.top_k, args.warmup, corpus.vectors)
            row.update(figures)
            row["rss_mb"] = resident_mb()
            if db.startswith("postgresql://"):  # the server's own memory (None for one on another machine)
                row["server_pss_mb"] = server_memory_mb(db)
            if n in args.langgraph_sizes:
                row["langgraph"] = bench_langgraph(corpus, qs, n, args.top_k, args.langgraph_queries, ref)
            rows.append(row)
            print_size(row, args.batch)
            if args.profile and n == args.sizes[-1]:
                await profile_search(mem, qs, args.top_k)
    finally:
        await mem.close()
    out = summary(rows, done / insert_s, args, machine(load_start))
    out["rss_mb_after_data"] = data_rss
    out["total_s"] = round(time.perf_counter() - t0, 1)
    return out


def tenants(args: argparse.Namespace, db: str) -> dict[str, Any]:
    from bench.store_tenants import bench_tenants

    n = max(args.sizes)
    corpus = make_corpus(args.seed, n, args.vocab)
    data_rss = resident_mb()
    out = asyncio.run(
        bench_tenants(db, corpus, n, args.tenants, args.queries, args.top_k, args.batch, args.seed)
    )
    # this process: after the single-namespace phase too (its peak is that one's) unless --tenants-only
    out["rss_mb"] = resident_mb()
    out["rss_mb_after_data"] = data_rss
    out["own_process"] = bool(args.tenants_only)
    if db.startswith("postgresql://"):
        out["server_pss_mb"] = server_memory_mb(db)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    global DIM
    args = parse_args(argv)
    DIM = args.dim
    import bench.store_data as store_data
    from bench.store_backends import backend_dbs, concurrent_writers, locomo_recall, print_side_by_side

    store_data.DIM = DIM

    results: dict[str, dict[str, Any]] = {}
    with backend_dbs(args.backends, args.pg_url) as make:
        for backend in args.backends:
            print(f"\n=== {backend}", flush=True)
            out: dict[str, Any] = {}
            if not args.tenants_only:
                db = args.db if args.db and backend == "sqlite" else make(backend, "bench_search")
                out = asyncio.run(run(args, db))
                out["concurrency"] = [
                    concurrent_writers(make(backend, f"bench_writers_{w}"), w, args.writer_items)
                    for w in args.writers
                ]
                for c in out["concurrency"]:
                    print(f"  {c['writers']:>2} concurrent writers: {c['items_per_s']:,} items/s", flush=True)
            if args.tenants:
                out["tenants"] = tenants(args, make(backend, "bench_tenants"))
                t = out["tenants"]
                print(
                    f"  {t['n']:,} items over {t['namespaces']:,} namespaces: insert {t['insert_per_s']:,}/s, "
                    f"dense p50 {t['dense']['p50_ms']} ms, hybrid p50 {t['hybrid']['p50_ms']} ms, cold "
                    f"{t['cold_dense_ms']} / {t['cold_hybrid_ms']} ms, dense hit@k {t['dense']['hit_at_k']}",
                    flush=True,
                )
            if args.locomo and not args.tenants_only:
                out["locomo"] = asyncio.run(locomo_recall(make(backend, "bench_locomo")))
                print(f"  LoCoMo recall@10: {out['locomo']['recall_at_10']}", flush=True)
            results[backend] = out
    if not args.tenants_only:
        print_side_by_side(results)
    if args.plot:
        from bench.store_report import plot_latency

        plot_latency(results, args.plot)
        print(f"plot: {args.plot}", file=sys.stderr)
    final: dict[str, Any] = {"backends": results}
    if len(results) == 2 and all("locomo" in r for r in results.values()):
        a, b = (results[x]["locomo"]["recall_at_10"] for x in args.backends)
        final["locomo_recall_at_10_diff"] = {m: round(b[m] - a[m], 6) for m in a}
    print(json.dumps(final))


if __name__ == "__main__":
    main()
