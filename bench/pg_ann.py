"""pgvector's HNSW in memrl's Postgres store: recall@10 against exact and latency per ``hnsw.ef_search``
(issue 59: Postgres at the same recall as the in-process graph, 0.95 at 1M).

One namespace of ``--n`` items (bench/store_data.py's texts and 384-d vectors, inserted through
``AsyncMemory.add_many`` as bench/store.py does) on a local Postgres server (the ``postgres`` extra's, or
``--pg-url``); the namespace's HNSW index is built by the store itself at its first dense search (its
``HNSW_M`` and ``HNSW_EF_CONSTRUCTION`` unless ``--m`` / ``--ef-construction`` say otherwise), timed. Then, for each ``--efs`` value, ``--queries`` queries
(vectors near stored ones) through the store's own HNSW statement (``PostgresStore.vector_ann`` with that
``ef_search``, its candidates re-scored exactly as the store does): recall@10 against numpy's exact top 10
over the same vectors, and p50/p99 of the statement. Last, memrl's dense vector search as a user calls it
(``mem.search(mode="dense", **PLAIN)``: the store's own ``ef_search`` choice, ``EF_MIN``) on other queries
(``--check-seed``), so that a floor chosen from the sweep is checked on queries it was not chosen on: its
recall, p50 and p99.
The last line of stdout is one JSON object.

Run::

    .venv/bin/python -m bench.pg_ann --n 30000 --queries 50               # a minute
    nice -n 5 .venv/bin/python -m bench.pg_ann --n 1000000 --queries 100  # the issue's size (about an hour here)
    .venv/bin/python -m bench.pg_ann --n 1000000 --pg-url URL --reuse     # again on the database left at URL
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from bench.store_data import (
    NAMESPACE,
    LookupEmbedder,
    make_corpus,
    make_queries,
    numpy_top,
    stats,
)
from bench.store_data import overlap as recall


async def run(args: argparse.Namespace, db: str) -> dict[str, Any]:
    from bench.store import insert
    from memrl.memory.backends.postgres import ann
    from memrl.memory.facade.memory import AsyncMemory
    from memrl.memory.index.ann import exact_scores
    from memrl.memory.search import PLAIN

    corpus = make_corpus(args.seed, args.n, args.vocab)
    emb = LookupEmbedder(corpus.texts, corpus.vectors, name=f"bench-lookup-{args.seed}")
    mem = AsyncMemory(db, embedder=emb, namespace=NAMESPACE)
    m, efc = ann.hnsw_params(args.m, args.ef_construction)
    out: dict[str, Any] = {"n": args.n, "queries": args.queries, "top_k": args.top_k, "m": m,
                           "ef_construction": efc}  # fmt: skip
    try:
        # what the timings depend on most: whether the index's pages fit the server's buffer cache
        out["shared_buffers"] = mem.store.read("SHOW shared_buffers")[0][0]
        if args.reuse:  # the items an earlier run of the same --n and --seed inserted
            (have,) = mem.store.read("SELECT count(*) FROM memories WHERE namespace = ?", [NAMESPACE])[0]
            if have != args.n:
                raise SystemExit(f"--reuse: the database holds {have:,} items, not --n {args.n:,}")
            out["reused"] = True
        else:
            seconds = await insert(mem, corpus, 0, args.n, args.batch)
            out["insert_per_s"] = round(args.n / seconds)
            print(f"inserted {args.n:,} items in {seconds:.1f} s", file=sys.stderr, flush=True)
        t = time.perf_counter()
        if args.m is not None or args.ef_construction is not None:  # not the store's build parameters
            mem.store.ensure_hnsw(NAMESPACE, emb.name, emb.dim, m=m, ef_construction=efc)
        idx = await mem.index.sync(NAMESPACE)  # builds the namespace's HNSW index past ann_min
        out["build_s"] = round(time.perf_counter() - t, 1)
        if not getattr(idx, "hnsw_dim", 0):
            raise SystemExit(f"no HNSW index at n={args.n} (below ann_min {mem.index.ann_min}?)")
        print(f"HNSW index built in {out['build_s']} s", file=sys.stderr, flush=True)
        qs = make_queries(corpus, args.n, args.queries + args.warmup, args.seed)
        matrix = corpus.vectors[: args.n]
        exact = [numpy_top(matrix, q, args.top_k).tolist() for q in qs.vectors]
        rows = mem.store.read(
            "SELECT rid, id FROM memories WHERE namespace = ?", [NAMESPACE]
        )  # item m{i} is row i of the corpus
        index_of = {rid: int(item_id[1:]) for rid, item_id in rows}
        model, dim, k = emb.name, emb.dim, args.top_k
        out["sweep"] = []
        for ef in args.efs:
            ms, rec = [], []
            for i, q in enumerate(qs.vectors):
                t = time.perf_counter()
                got = mem.store.vector_ann(NAMESPACE, model, dim, q, k + idx.MARGIN, None, None, ef_search=ef)
                rids = np.array([r for r, _ in got], dtype=np.int64)
                top = rids[np.argsort(-exact_scores(np.stack([v for _, v in got]), q), kind="stable")[:k]]
                if i >= args.warmup:
                    ms.append((time.perf_counter() - t) * 1e3)
                    rec.append(recall([index_of[int(r)] for r in top], exact[i]))
            row = {"ef_search": ef, "recall_at_10": round(float(np.mean(rec)), 4), **stats(ms)}
            out["sweep"].append(row)
            print(f"ef_search {ef}: recall@10 {row['recall_at_10']}, p50 {row['p50_ms']} ms", file=sys.stderr,
                  flush=True)  # fmt: skip
        # the store's own choice, on other queries than the sweep's (a setting chosen from the sweep is
        # checked on queries it was not chosen on); on each query the store's HNSW statement alone (the
        # fetch and ef_search the search sends) is timed beside the search, in alternating order, so that
        # what the search adds around the statement is measured on the same queries and the same cache
        qs = make_queries(corpus, args.n, args.queries + args.warmup, args.check_seed)
        exact = [numpy_top(matrix, q, args.top_k).tolist() for q in qs.vectors]
        fetch = max(PLAIN["candidates"], k) + idx.MARGIN
        passes = []
        for _ in range(args.passes):  # the same queries again: the second pass finds the pages the first read
            ms, alone, rec = [], [], []
            for i, (text, q) in enumerate(zip(qs.texts, qs.vectors, strict=True)):
                for first in ("search", "statement") if i % 2 == 0 else ("statement", "search"):
                    t = time.perf_counter()
                    if first == "search":
                        hits = await mem.search(text, top_k=k, mode="dense", query_vector=q, **PLAIN)
                    else:
                        mem.store.vector_ann(NAMESPACE, model, dim, q, fetch, None, None)
                    took = (time.perf_counter() - t) * 1e3
                    if i >= args.warmup:
                        (ms if first == "search" else alone).append(took)
                if i >= args.warmup:
                    rec.append(recall([int(h.item.id[1:]) for h in hits], exact[i]))
            around = [a - b for a, b in zip(ms, alone, strict=True)]
            passes.append({"recall_at_10": round(float(np.mean(rec)), 4), "ef_min": ann.EF_MIN,
                           "query_seed": args.check_seed, **stats(ms), "statement": stats(alone),
                           "around_statement_p50_ms": round(float(np.median(around)), 3)})  # fmt: skip
            print(f"memrl dense search, pass {len(passes)}: {passes[-1]}", file=sys.stderr, flush=True)
        out["memrl_dense"] = passes[0]
        if args.passes > 1:
            out["memrl_dense_passes"] = passes
    finally:
        await mem.close()
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.pg_ann", description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=1_000_000, help="items in the namespace")
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--warmup", type=int, default=5, help="queries run first, not counted")
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--efs", default="40,100,200,400,800,1000", help="hnsw.ef_search values, comma-separated")
    p.add_argument("--batch", type=int, default=5000, help="items per add_many call")
    p.add_argument("--vocab", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=0, help="the data's and the sweep's queries' seed")
    p.add_argument(
        "--check-seed", type=int, default=1, help="the seed of the queries memrl's search is scored on"
    )
    p.add_argument(
        "--ann-min", type=int, default=None, help="the store's HNSW threshold (default the store's)"
    )
    p.add_argument("--m", type=int, default=None, help="HNSW m (default the store's, HNSW_M)")
    p.add_argument(
        "--ef-construction", type=int, default=None, help="HNSW ef_construction (default the store's)"
    )
    p.add_argument(
        "--pg-url", default=None, help="a server to use (default: a local one, the postgres extra)"
    )
    p.add_argument("--pg-setting", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting of the local server (repeatable; e.g. shared_buffers=3GB: at 1M the index is "
                        "2 GB); a server given by --pg-url keeps its own")  # fmt: skip
    p.add_argument(
        "--passes",
        type=int,
        default=1,
        help="times the check queries are run (from the second, the pages the first read are cached)",
    )
    p.add_argument("--reuse", action="store_true",
                   help="with --pg-url: keep the database an earlier run left there (same --n and --seed) and "
                        "skip the insert; the index is built only if it is missing")  # fmt: skip
    args = p.parse_args(argv)
    if args.reuse and not args.pg_url:
        p.error("--reuse needs --pg-url (a local server is thrown away after each run)")
    if args.pg_setting and args.pg_url:
        p.error("--pg-setting applies to the local server: restart the server at --pg-url with the setting")
    if any("=" not in kv for kv in args.pg_setting):
        p.error("--pg-setting takes KEY=VALUE")
    args.pg_settings = dict(kv.split("=", 1) for kv in args.pg_setting)
    if args.passes < 1:
        p.error("--passes must be at least 1")
    args.efs = [int(x) for x in args.efs.split(",") if x]
    return args


def main(argv: Sequence[str] | None = None) -> None:
    from bench.store_backends import backend_dbs

    args = parse_args(argv)
    t0 = time.perf_counter()
    with backend_dbs(["postgres"], args.pg_url, args.pg_settings) as make:
        db = (
            args.pg_url.rsplit("/", 1)[0] + "/bench_pg_ann"
            if args.reuse
            else make("postgres", "bench_pg_ann")
        )
        if args.ann_min is not None:
            import memrl.memory.index.dense as dense

            dense.DenseIndexes.ANN_MIN = args.ann_min
        out = asyncio.run(run(args, db))
    out["total_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
