"""A new process's first search of one big namespace (a million items by default), with the index snapshot
files and without them (issue 59: a first query under a second at 1M).

The store is bench/store_data.py's texts and 384-d vectors as bench/peers.py stores them (sessions of 20,
SQLite, the HNSW graph, ``<db>.index/`` written by the building process's searches and close). It is built
once at ``--store`` when that file does not exist (at 1M about 40 minutes on 2 cores: the insert, then the
graph and every snapshot at the first searches) and kept, so that the timings can be repeated. Each timing
is a fresh interpreter that opens the store and searches once in one mode:

- ``dense``: memrl's vector search (``PLAIN`` options, as the peers' rows);
- ``default``: dense mode with the default options (the neighbour window and the re-scorer);
- ``bm25``, ``hybrid``: the default options.

``--store`` may also be a Postgres database URL (bench/pg_ann.py builds the same namespace faster): its
files are this machine's (``$MEMRL_CACHE_DIR/index/``), and when there are none yet one process per mode
writes them first (``primed_first_ms``); the warm dense queries are then random unit vectors, with no recall
(bench/pg_ann.py measures it).

Cases: ``loaded`` (the files as the last process left them) and ``without`` (``<db>.index`` moved aside
first, the ANN graph file kept; what the process saves is deleted afterwards and the files put back: the
cost of a store without snapshots). Each child reports its import, open and first-search times, which
indexes it took from files, then the median of ``--warm`` more searches in the same mode and its resident
memory (anonymous: what the process holds; file-backed: mapped snapshot pages, reclaimable). Medians over ``--repeats``; the last line of stdout is one JSON object.

Run::

    nice -n 5 .venv/bin/python -m bench.cold_1m --store /tmp/cold/s1m.db              # builds it first if absent
    nice -n 5 .venv/bin/python -m bench.cold_1m --store /tmp/cold/s1m.db --cases loaded,without --repeats 1
    .venv/bin/python -m bench.cold_1m --store postgresql://postgres@127.0.0.1:55432/bench_pg_ann --cases loaded,without
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MODES = ("dense", "default", "bm25", "hybrid")
QUERY = "cold query trounroukpaik"

CHILD = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
from bench import peers
from bench.store_data import DIM
p = peers.MemrlPeer(sys.argv[1] if "://" in sys.argv[1] else __import__("pathlib").Path(sys.argv[1]))
import memrl
t1 = time.perf_counter()
p.open()
t2 = time.perf_counter()
mode, text = sys.argv[2], sys.argv[3]
q = np.ones(DIM, dtype=np.float32) / DIM**0.5
from bench.cold_1m import search_once
hits = search_once(p, mode, q, text)
t3 = time.perf_counter()
warm, recall = [], []
n_warm = int(sys.argv[4])
idx = p.mem.index._indexes.current(peers.NAMESPACE)
server = p.mem.index.backend == "pgvector"  # Postgres: pgvector searches in the database (recall: bench/pg_ann.py)
if mode != "bm25" and n_warm:  # query vectors near stored ones (as bench/store_data.py's queries)
    from bench.store_data import QUERY_NOISE
    from memrl.memory.index.ann import exact_scores
    rng = np.random.default_rng(0)
    if server:
        qs = rng.standard_normal((n_warm, DIM))
    else:
        qs = idx.matrix[rng.integers(0, idx.n, size=n_warm)] + (QUERY_NOISE / DIM**0.5) * rng.standard_normal((n_warm, DIM))
    qs = (qs / np.linalg.norm(qs, axis=1, keepdims=True)).astype(np.float32)
for i in range(n_warm):  # warm searches: the same mode, other words and vectors
    v = qs[i] if mode != "bm25" else q
    t = time.perf_counter()
    got = search_once(p, mode, v, text if mode in ("dense", "default") else f"{text} w{i}")
    warm.append((time.perf_counter() - t) * 1e3)
    if mode == "dense" and not server:  # memrl's vector search against numpy's exact top 10 over the same matrix
        exact = idx.rids[np.argsort(-exact_scores(idx.matrix, v), kind="stable")[:10]].tolist()
        ids = {int(it.id[1:]) for it in p.mem.store.get_many_by_rid(exact).values()}
        recall.append(len(set(got) & ids) / 10)
mem = {}
with open("/proc/self/status", encoding="ascii") as f:
    for line in f:
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            mem[key] = round(int(value.split()[0]) / 1024, 1)
index = p.mem.index
origins = {}
for ns, s in index.facts._cache.items():
    origins["facts"] = s.origin
dense = getattr(index, "_indexes", {}) or {}
for ns, idx in getattr(dense, "items", lambda: [])():
    origins["dense"] = getattr(idx, "origin", None)
for ns, nt in index.terms._cache.items():
    origins["terms"] = "snapshot" if type(nt.units).__name__ == "Packed" else "store"
warm.sort()
print(json.dumps({"import_ms": (t1 - t0) * 1e3, "open_ms": (t2 - t1) * 1e3, "first_ms": (t3 - t2) * 1e3,
                  "warm_p50_ms": warm[len(warm) // 2] if warm else 0.0,
                  "warm_p99_ms": warm[min(len(warm) - 1, int(0.99 * len(warm)))] if warm else 0.0,
                  "dense_recall_at_10": sum(recall) / len(recall) if recall else None, "rss_mb": mem.get("VmRSS", 0.0),
                  "rss_peak_mb": mem.get("VmHWM", 0.0), "rss_anon_mb": mem.get("RssAnon", 0.0),
                  "rss_file_mb": mem.get("RssFile", 0.0), "hits": hits, "from_files": origins}))
"""


def built(store: str | Path) -> bool:
    """Whether the store holds the namespace already (a SQLite file exists; a server database has its items)."""
    if not is_server(store):
        return Path(store).exists()
    from bench import peers
    from memrl.memory.backends.postgres.store import PostgresStore

    db = PostgresStore(str(store))
    try:
        return db.read("SELECT count(*) FROM memories WHERE namespace = ?", [peers.NAMESPACE])[0][0] > 0
    finally:
        db.close()


def build(store: str | Path, n: int, query: str) -> dict[str, float]:
    """The store of ``n`` items at ``store``, searched once in every mode and closed (which writes its files)."""
    from bench import peers
    from bench.store_data import make_corpus

    times: dict[str, float] = {}
    t = time.perf_counter()
    corpus = make_corpus(0, n, 20_000)
    p = peers.MemrlPeer(store)
    p.insert(corpus.texts[:n], corpus.vectors[:n])
    times["insert_s"] = time.perf_counter() - t
    for mode in MODES:  # each builds (and saves) what its mode needs
        t = time.perf_counter()
        search_once(p, mode, corpus.vectors[0], query)
        times[f"first_{mode}_s"] = time.perf_counter() - t
    t = time.perf_counter()
    p.loop.run_until_complete(p.mem.close())
    times["close_s"] = time.perf_counter() - t
    return {k: round(v, 1) for k, v in times.items()}


def search_once(p: Any, mode: str, q: Any, query: str) -> list[int]:
    """One top-10 search of ``mode`` (see the module docstring) through a bench.peers ``MemrlPeer``."""
    if mode == "dense":
        return p.dense(q, 10, query)
    if mode == "default":
        return p._search(query, q, "dense", 10)
    if mode == "bm25":
        return p.text(query, 10)
    return p.hybrid(query, q, 10)


def is_server(store: str | Path) -> bool:
    return isinstance(store, str) and store.startswith(("postgres://", "postgresql://"))


def index_dir(store: str | Path) -> Path:
    """Where the store's snapshot files are (``<db>.index``, or this machine's cache for a server database)."""
    from memrl.memory.backends.urls import redact
    from memrl.memory.index.snapshot import snapshot_dir

    folder = snapshot_dir(redact(store) if is_server(store) else str(store))
    if folder is None:
        raise SystemExit(
            "this store keeps no snapshot files here (MEMRL_SERVER_INDEX_FILES=0?): nothing to time"
        )
    return folder


def run_child(store: str | Path, mode: str, query: str, warm: int = 0, env: dict | None = None) -> dict:
    cmd = [sys.executable, "-c", CHILD, str(store), mode, query, str(warm)]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if done.returncode != 0:
        raise SystemExit(f"the {mode} child failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def without_files(store: str | Path, mode: str, query: str, warm: int = 0) -> dict:
    """One child with the store's snapshot files out of its reach (``<db>.index`` moved aside; for a server
    database an empty cache folder); what it writes is deleted and the files put back."""
    if is_server(store):
        with tempfile.TemporaryDirectory(prefix="memrl-cold-cache-") as cache:
            return run_child(store, mode, query, warm, {"MEMRL_CACHE_DIR": cache})
    index, aside = Path(f"{store}.index"), Path(f"{store}.index.aside")
    index.rename(aside)
    try:
        return run_child(store, mode, query, warm)
    finally:
        shutil.rmtree(index, ignore_errors=True)
        aside.rename(index)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", required=True,
                   help="the store's SQLite file, or a Postgres database URL (built when absent or empty; "
                        "bench/pg_ann.py builds the same namespace faster)")  # fmt: skip
    p.add_argument("--n", type=int, default=1_000_000, help="items, when the store is built")
    p.add_argument("--modes", default=",".join(MODES), help="search modes timed, comma-separated")
    p.add_argument(
        "--cases",
        default="loaded",
        help="loaded and/or without (the files moved aside; a server database's: an empty cache)",
    )
    p.add_argument("--repeats", type=int, default=2, help="fresh processes per mode and case (medians)")
    p.add_argument("--warm", type=int, default=20, help="searches after the first, for warm p50 and memory")
    p.add_argument("--query", default=QUERY, help="the query's text (its vector: a fixed unit vector)")
    args = p.parse_args(argv)
    from memrl.memory.backends.urls import redact

    if not is_server(args.store):
        args.store = Path(args.store)
    row: dict = {"store": redact(str(args.store)), "repeats": args.repeats, "query": args.query}
    if not built(args.store):
        if not is_server(args.store):
            args.store.parent.mkdir(parents=True, exist_ok=True)
        row["build"] = build(args.store, args.n, args.query)
        print(f"built {args.n} items: {row['build']}", flush=True)
    index = index_dir(args.store)
    if is_server(args.store) and not list(index.glob("*.snap")):
        # a server database's files are each client's own: this machine's first process builds and saves them
        row["primed_first_ms"] = {}
        for mode in args.modes.split(","):
            got = run_child(args.store, mode, args.query)
            row["primed_first_ms"][mode] = round(got["first_ms"], 1)
            print(
                f"{mode}: a first search that writes this machine's files {got['first_ms']:.0f} ms",
                flush=True,
            )
    row["index_mb"] = round(sum(f.stat().st_size for f in index.glob("*")) / 2**20, 1)
    for mode in args.modes.split(","):
        out: dict = {}
        for case in args.cases.split(","):
            if case not in ("loaded", "without"):
                raise SystemExit(f"unknown case {case!r}: use loaded and/or without")
            runs = [
                (run_child if case == "loaded" else without_files)(args.store, mode, args.query, args.warm)
                for _ in range(args.repeats)
            ]
            out[case] = {
                k: round(statistics.median(r[k] for r in runs), 1)
                for k in runs[0]
                if k.endswith(("_ms", "_mb", "_at_10")) and runs[0][k] is not None
            }
            out[case]["from_files"] = runs[-1]["from_files"]
            out[case]["hits"] = runs[0]["hits"]
            print(f"{mode} {case}: first search {out[case]['first_ms']} ms (open {out[case]['open_ms']} ms, "
                  f"import {out[case]['import_ms']} ms), from files: {out[case]['from_files']}", flush=True)  # fmt: skip
        hits = [c.pop("hits") for c in out.values()]
        out["same_results"] = all(h == hits[0] for h in hits)
        out["hits"] = len(hits[0])
        row[mode] = out
    print(json.dumps(row))


if __name__ == "__main__":
    main()
