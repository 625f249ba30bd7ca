"""Insert rate of one process on SQLite and Postgres, side by side (issue 59: Postgres at least 0.5x SQLite).

The items and vectors of bench/store.py (:mod:`bench.store_data`), added through ``add_many`` into a new,
empty database of each back-end, the back-ends alternated round by round (``--rounds``) so that a machine
that slows down in the middle costs both alike; each round's ratio is Postgres' rate over SQLite's in that
round. The clock covers ``add_many`` only: the rows, the history, the embedding cache, and on Postgres the
BM25 postings (``lex_docs``, ``lex_terms``) and the pgvector rows, as a user's write pays them. SQLite writes
no postings: its BM25 index is built in the process at the first search (and kept in snapshot files), which
this clock does not cover, so each row also times the first BM25 search after the insert, in the same
process (``first_bm25_s``: SQLite's index build, Postgres' query over its postings), and the rate with it
(``with_first_bm25_items_per_s``, and its ratio). No dense search, so no ANN graph or HNSW index is built.

Unless ``--pg-url`` names a server, a throwaway one is started from the ``postgres`` extra with the
settings of bench/store.py (shared_buffers 512 MB, max_wal_size 4 GB, fsync off)::

    python -m bench.insert_rate --n 100000 --rounds 3

The last line printed is one JSON object: each round's rates and ratios, their medians, the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench.store import insert
from bench.store_backends import backend_dbs
from bench.store_data import LookupEmbedder, load_avg, machine, make_corpus
from memrl.memory.facade.memory import AsyncMemory


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=40_000, help="items per database (default 40,000)")
    p.add_argument("--batch", type=int, default=5_000, help="items per add_many call (default 5,000)")
    p.add_argument("--rounds", type=int, default=2, help="fresh databases per back-end, alternated")
    p.add_argument("--backends", default="sqlite,postgres")
    p.add_argument("--pg-url", default=None, help="a server to use (databases bench_insert_* made there)")
    p.add_argument("--vocab", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(args.backends) - {"sqlite", "postgres"}
    if unknown or not args.backends:
        p.error(f"--backends: sqlite and/or postgres, not {sorted(unknown) or 'nothing'}")
    if args.n < 1 or args.batch < 1 or args.rounds < 1:
        p.error("--n, --batch and --rounds must be at least 1")
    return args


async def one(db: str, corpus: Any, embedder: Any, args: argparse.Namespace) -> dict[str, Any]:
    mem = AsyncMemory(db, embedder=embedder)
    try:
        await mem.add("warm up", namespace="warm")  # schema, pool and analyzer ready before the clock
        seconds = await insert(mem, corpus, 0, args.n, args.batch)
        t0 = time.perf_counter()
        hits = await mem.search(corpus.texts[0], namespace="bench", top_k=10, mode="bm25")
        first = time.perf_counter() - t0
        stored = await mem.count(namespace="bench")
    finally:
        await mem.close()
    if stored != args.n:  # a rate of items that did not land is no rate
        raise RuntimeError(f"{db}: {stored} items stored of {args.n}")
    if not hits:  # the first item's own text finds nothing: the postings are missing
        raise RuntimeError(f"{db}: BM25 found nothing for a stored item's text")
    return {"seconds": round(seconds, 4), "items_per_s": round(args.n / seconds, 1),
            "first_bm25_s": round(first, 4),
            "with_first_bm25_items_per_s": round(args.n / (seconds + first), 1)}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    load_start = load_avg()
    corpus = make_corpus(args.seed, args.n, args.vocab)
    embedder = LookupEmbedder(corpus.texts, corpus.vectors, name=f"bench-lookup-{args.seed}")
    rounds: list[dict[str, Any]] = []
    with backend_dbs(args.backends, args.pg_url) as make:
        for r in range(args.rounds):
            row: dict[str, Any] = {"round": r}
            order = args.backends if r % 2 == 0 else args.backends[::-1]
            for backend in order:
                row[backend] = asyncio.run(
                    one(make(backend, f"bench_insert_{r}_{backend}"), corpus, embedder, args)
                )
                print(f"round {r} {backend}: {row[backend]['items_per_s']:,.0f} items/s", file=sys.stderr)
            if {"sqlite", "postgres"} <= set(row):
                pg, lite = row["postgres"], row["sqlite"]
                row["ratio"] = round(pg["items_per_s"] / lite["items_per_s"], 3)
                row["ratio_with_first_bm25"] = round(
                    pg["with_first_bm25_items_per_s"] / lite["with_first_bm25_items_per_s"], 3
                )
            rounds.append(row)
    out: dict[str, Any] = {"bench": "insert_rate", "n": args.n, "batch": args.batch, "rounds": rounds}
    for backend in args.backends:
        out[f"{backend}_median_items_per_s"] = statistics.median(x[backend]["items_per_s"] for x in rounds)
    if all("ratio" in x for x in rounds):
        out["ratio_median"] = statistics.median(x["ratio"] for x in rounds)
        out["ratio_with_first_bm25_median"] = statistics.median(x["ratio_with_first_bm25"] for x in rounds)
    out["machine"] = machine(load_start)
    out["date"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
