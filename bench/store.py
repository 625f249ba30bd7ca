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

    .venv/bin/python bench/store.py              # full: 1k, 10k, 100k (a few minutes, mostly the 100k insert)
    .venv/bin/python bench/store.py --quick      # smoke run: 1k and 10k, 50 queries
    .venv/bin/python bench/store.py --sizes 1000,10000,100000 --queries 200 --top-k 10 --langgraph-sizes 10000
    .venv/bin/python bench/store.py --langgraph-sizes ""   # skip InMemoryStore
    .venv/bin/python bench/store.py --profile    # at the largest size, also: cProfile of the cold load and of
                                                 # hybrid/bm25 search, db size by table

A table is printed as it goes; the last line of stdout is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import hashlib
import io
import json
import os
import platform
import pstats
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from memrl.errors import StoreError
from memrl.memory.embedder import Embedder
from memrl.memory.facade import AsyncMemory
from memrl.memory.store import NewItem

DIM = 384
CHUNK = 10_000  # items are generated in seeded chunks, so item i never depends on the largest size
N_CLUSTERS = 1000
TOPIC_WORDS = 6  # per cluster, drawn from mid-frequency content words
ITEM_NOISE = 1.0  # norm of the noise around a cluster centre (cosine to the centre ~0.7)
QUERY_NOISE = 0.8  # norm of the noise around the target item (cosine to the target ~0.78)
NAMESPACE = "bench"
TYPES = ("episodic", "semantic", "procedural")
#: The most frequent English words, in rank order: the head of the Zipf distribution. Some are memrl
#: stopwords (dropped from BM25 queries), others ("not", "all", "about", ...) are not and hit long lists.
FUNCTION_WORDS = (
    "the of and to a in is that it was for on with as he be by at i you this had not are but from or have an "
    "they which one were her all she there would their we him been has when who will more no if out so said "
    "what up its about into than them can only other new some could time these two may then do first any my "
    "now such like our over"
).split()


# ---------------------------------------------------------------------- synthetic data
def make_vocab(seed: int, size: int) -> list[str]:
    """Function words first, then ``size`` distinct pronounceable synthetic words (rank order = frequency)."""
    rng = np.random.default_rng([seed, 0])
    onsets = list("bcdfghjklmnprstvz") + ["br", "ch", "dr", "gl", "kr", "pl", "sh", "st", "tr", "th"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ou", "ea"]
    codas = ["", "", "", "n", "r", "l", "s", "m", "k", "nd", "st"]
    taken = set(FUNCTION_WORDS)
    words: list[str] = []
    while len(words) < size:
        n_syl = int(rng.integers(2, 4))
        w = "".join(
            onsets[rng.integers(len(onsets))]
            + vowels[rng.integers(len(vowels))]
            + codas[rng.integers(len(codas))]
            for _ in range(n_syl)
        )
        if w not in taken:
            taken.add(w)
            words.append(w)
    return FUNCTION_WORDS + words


def zipf_probs(n: int, s: float = 1.0) -> np.ndarray:
    p = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** s
    return p / p.sum()


@dataclass
class Corpus:
    """Item texts and unit vectors (row i is item ``m{i}``), plus what queries are built from."""

    texts: list[str]
    vectors: np.ndarray  # (n, DIM) float32, unit rows
    words: list[np.ndarray]  # vocabulary indices of each item's words
    vocab: list[str]
    probs: np.ndarray


def make_corpus(seed: int, n: int, vocab_size: int) -> Corpus:
    vocab = make_vocab(seed, vocab_size)
    probs = zipf_probs(len(vocab))
    rng = np.random.default_rng([seed, 1])
    centres = rng.standard_normal((N_CLUSTERS, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    n_func = len(FUNCTION_WORDS)
    topics = rng.integers(n_func + 200, n_func + 5000, size=(N_CLUSTERS, TOPIC_WORDS))
    texts: list[str] = []
    words: list[np.ndarray] = []
    vecs: list[np.ndarray] = []
    seen: set[str] = set()
    for c in range((n + CHUNK - 1) // CHUNK):
        rng = np.random.default_rng([seed, 2, c])
        cluster = rng.integers(0, N_CLUSTERS, size=CHUNK)
        v = centres[cluster] + (ITEM_NOISE / np.sqrt(DIM)) * rng.standard_normal((CHUNK, DIM)).astype(
            np.float32
        )
        vecs.append(v / np.linalg.norm(v, axis=1, keepdims=True))
        lengths = rng.integers(5, 21, size=CHUNK)
        n_topic = rng.integers(1, 4, size=CHUNK)
        zipf = rng.choice(len(vocab), size=int(lengths.sum()), p=probs)
        topic_pick = rng.integers(0, TOPIC_WORDS, size=(CHUNK, 3))
        pos = 0
        for j in range(min(CHUNK, n - c * CHUNK)):
            k = int(n_topic[j])
            w = np.concatenate([topics[cluster[j], topic_pick[j, :k]], zipf[pos : pos + lengths[j] - k]])
            pos += int(lengths[j])
            rng.shuffle(w)
            text = " ".join(vocab[i] for i in w)
            while text in seen:  # the embedding cache is keyed by content: texts must be distinct
                extra = int(rng.integers(n_func, len(vocab)))
                w = np.append(w, extra)
                text += " " + vocab[extra]
            seen.add(text)
            texts.append(text)
            words.append(w)
    return Corpus(texts, np.ascontiguousarray(np.concatenate(vecs)[:n]), words, vocab, probs)


@dataclass
class Queries:
    texts: list[str]
    vectors: np.ndarray  # (q, DIM) float32, unit rows
    targets: np.ndarray  # item index each query was built from


def make_queries(corpus: Corpus, n: int, count: int, seed: int) -> Queries:
    """Queries over the first ``n`` items: 1-2 words of a target item plus 1-2 common words, and a vector
    near the target's."""
    rng = np.random.default_rng([seed, 3, n])
    targets = rng.integers(0, n, size=count)
    noise = (QUERY_NOISE / np.sqrt(DIM)) * rng.standard_normal((count, DIM)).astype(np.float32)
    vecs = corpus.vectors[targets] + noise
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    texts: list[str] = []
    seen: set[str] = set()
    for t in targets:
        content = [w for w in corpus.words[t] if w >= len(FUNCTION_WORDS)] or list(corpus.words[t])
        while True:
            own = rng.choice(content, size=min(len(content), int(rng.integers(1, 3))), replace=False)
            common = rng.choice(len(corpus.vocab), size=int(rng.integers(1, 3)), p=corpus.probs)
            text = " ".join(corpus.vocab[i] for i in [*common, *own])
            if text not in seen:
                break
        seen.add(text)
        texts.append(text)
    return Queries(texts, np.ascontiguousarray(vecs, dtype=np.float32), targets)


class LookupEmbedder(Embedder):
    """Returns precomputed vectors for known texts; any other text gets a deterministic random unit vector."""

    def __init__(self, texts: Sequence[str], vectors: np.ndarray, name: str) -> None:
        self.name = name
        self.dim = vectors.shape[1]
        self.vectors = vectors
        self.row_of = {t: i for i, t in enumerate(texts)}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            row = self.row_of.get(text)
            if row is not None:
                out[i] = self.vectors[row]
            else:
                seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
                v = np.random.default_rng(seed).standard_normal(self.dim)
                out[i] = v / np.linalg.norm(v)
        return out


# ---------------------------------------------------------------------- measuring
def numpy_top(matrix: np.ndarray, q: np.ndarray, k: int, *, einsum: bool = False) -> np.ndarray:
    """Exact top-k rows by inner product, best first: the floor for any brute-force search.

    ``einsum=True`` scores without BLAS (one thread): on a busy machine, matmul's BLAS threads wait for a
    free core, which can make it slower than one thread by 10x and more."""
    scores = np.einsum("ij,j->i", matrix, q) if einsum else matrix @ q
    if k >= len(scores):
        return np.argsort(-scores, kind="stable")
    idx = np.argpartition(-scores, k - 1)[:k]
    return idx[np.argsort(-scores[idx], kind="stable")]


def stats(ms: Sequence[float]) -> dict[str, float]:
    a = np.asarray(ms)
    return {
        "p50_ms": round(float(np.percentile(a, 50)), 3),
        "p95_ms": round(float(np.percentile(a, 95)), 3),
        "mean_ms": round(float(a.mean()), 3),
    }


def item_index(key: str) -> int:
    return int(key[1:])  # "m123" -> 123


def overlap(got: Sequence[int], want: Sequence[int]) -> float:
    return len(set(got) & set(want)) / max(len(want), 1)


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


async def bench_store(
    mem: AsyncMemory, qs: Queries, n: int, top_k: int, warmup: int
) -> tuple[dict[str, Any], np.ndarray]:
    """Time numpy (matmul and einsum), dense, hybrid and bm25 search on the same queries; returns figures
    and numpy's top-k (item indices).

    Methods take turns query by query, in an order that rotates, so background load hits them alike (on a
    busy machine it comes and goes within a second; blocks of queries per method were skewed by it 30x).
    """
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
    assert dense.n == n, f"the store holds {dense.n} vectors, expected {n}"
    matrix = dense.matrix[: dense.n]
    item_of_rid = dict(mem.store.read("SELECT rid, id FROM memories WHERE namespace = ?", (NAMESPACE,)))

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
            return [item_index(item_of_rid[int(r)]) for r in dense.rids[got]]
        return [item_index(h.item.id) for h in got]

    methods = {"numpy": numpy_run, "einsum": einsum_run, **{m: store(m) for m in ("dense", "hybrid", "bm25")}}
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


def print_profile(prof: cProfile.Profile, title: str, lines: int = 12) -> None:
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(lines)
    print(f"\n{title} (cProfile, by own time):", file=sys.stderr)
    print("\n".join(buf.getvalue().splitlines()[4:]).rstrip(), file=sys.stderr)


async def profile_search(mem: AsyncMemory, qs: Queries, top_k: int) -> None:
    """Where the time goes at the current size: the cold load, hybrid and bm25 search (cProfile), and the
    database's size by table."""
    store = mem.store
    try:
        rows = store.read("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC LIMIT 6")
        print(
            "\ndatabase size by table: " + ", ".join(f"{r[0]} {r[1] / 2**20:.0f} MB" for r in rows),
            file=sys.stderr,
        )
    except StoreError:
        pass  # SQLite built without the dbstat table
    mem.index.forget(NAMESPACE)
    prof = cProfile.Profile()
    prof.enable()  # nothing else runs on this event loop meanwhile
    await mem.search(qs.texts[0], namespace=NAMESPACE, top_k=top_k, mode="dense", query_vector=qs.vectors[0])
    prof.disable()
    print_profile(prof, "cold load: first dense search after index.forget")
    for mode in ("hybrid", "bm25"):
        prof = cProfile.Profile()
        prof.enable()
        for i in range(len(qs.texts)):
            await mem.search(
                qs.texts[i], namespace=NAMESPACE, top_k=top_k, mode=mode, query_vector=qs.vectors[i]
            )
        prof.disable()
        print_profile(prof, f"{len(qs.texts)} {mode} searches")


# ---------------------------------------------------------------------- report
def blas_threads() -> int | None:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    return max((p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"), default=None)


def machine(load_start: float | None) -> dict[str, Any]:
    """What the figures depend on. The load averages say how busy the machine was (noisy if above ~0.5)."""

    def ver(pkg: str) -> str | None:
        try:
            return version(pkg)
        except PackageNotFoundError:
            return None

    return {
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "load_avg_1m_start": load_start,
        "load_avg_1m_end": load_avg(),
        "blas_threads": blas_threads(),
        "platform": platform.platform(),
        "processor": platform.machine(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "sqlite": sqlite3.sqlite_version,
        "langgraph": ver("langgraph"),
    }


def load_avg() -> float | None:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def print_size(row: dict[str, Any], batch: int) -> None:
    lg = row.get("langgraph")
    print(
        f"\nn={row['n']:,}: insert {row['insert_per_s']:,} items/s through add_many (batches of {batch}; "
        f"history + embedding cache included, embedder cost excluded), dense cold load "
        f"{row['dense_cold_ms']:,.0f} ms, BM25 cold load {row['bm25_cold_ms']:,.0f} ms, db "
        + (f"{row['db_mb']} MB" if row["db_mb"] else "in memory"),
        flush=True,
    )
    print(f"  {'method':<10}{'p50 ms':>9}{'p95 ms':>9}{'mean ms':>9}{'x numpy':>9}{'recall':>8}{'hit@k':>7}")
    base = row["numpy"]["p50_ms"]
    recall = {"numpy": 1.0, "einsum": row["einsum_recall_vs_numpy"], "dense": row["dense_recall_vs_numpy"]}
    methods = {m: row[m] for m in ("numpy", "einsum", "dense", "hybrid", "hybrid_no_date_window", "bm25")}
    if lg:
        methods["langgraph"] = lg
        recall["langgraph"] = lg["recall_vs_numpy"]
    for name, s in methods.items():
        rec = f"{recall[name]:.3f}" if name in recall else "-"
        print(
            f"  {name:<10}{s['p50_ms']:>9.3f}{s['p95_ms']:>9.3f}{s['mean_ms']:>9.3f}"
            f"{s['p50_ms'] / base:>9.2f}{rec:>8}{s['hit_at_k']:>7.2f}",
            flush=True,
        )


def summary(
    rows: list[dict[str, Any]], insert_per_s: float, args: argparse.Namespace, host: dict[str, Any]
) -> dict[str, Any]:
    last = rows[-1]
    lg_rows = [r for r in rows if r.get("langgraph")]
    lg = lg_rows[-1] if lg_rows else None
    out = {
        "n": last["n"],
        "dense_p50_ms": last["dense"]["p50_ms"],
        "hybrid_p50_ms": last["hybrid"]["p50_ms"],
        "hybrid_no_date_window_p50_ms": last["hybrid_no_date_window"]["p50_ms"],
        "bm25_p50_ms": last["bm25"]["p50_ms"],
        "numpy_p50_ms": last["numpy"]["p50_ms"],
        "einsum_p50_ms": last["einsum"]["p50_ms"],
        "dense_cold_ms": last["dense_cold_ms"],
        "bm25_cold_ms": last["bm25_cold_ms"],
        "dense_vs_numpy": last["dense_vs_numpy"],
        "dense_recall_vs_numpy": min(r["dense_recall_vs_numpy"] for r in rows),
        "langgraph_n": lg["n"] if lg else None,
        "langgraph_p50_ms": lg["langgraph"]["p50_ms"] if lg else None,
        "langgraph_recall_vs_numpy": lg["langgraph"]["recall_vs_numpy"] if lg else None,
        "dense_p50_ms_at_langgraph_n": lg["dense"]["p50_ms"] if lg else None,
        "insert_per_s": round(insert_per_s),
        "targets": {
            "dense_within_2x_numpy_at_n": last["dense_vs_numpy"] <= 2.0,
            "dense_faster_than_langgraph": (lg["dense"]["p50_ms"] < lg["langgraph"]["p50_ms"])
            if lg
            else None,
            "hybrid_faster_than_langgraph": (lg["hybrid"]["p50_ms"] < lg["langgraph"]["p50_ms"])
            if lg
            else None,
            "hybrid_p50_under_50ms_at_n": last["hybrid"]["p50_ms"] < 50.0,
        },
        "per_size": rows,
        "config": {
            "sizes": [r["n"] for r in rows],
            "queries": args.queries,
            "top_k": args.top_k,
            "batch": args.batch,
            "db": "temp file" if args.db is None else args.db,
            "seed": args.seed,
            "dim": DIM,
            "vocab": args.vocab,
        },
        "notes": "latencies in ms of one search call (query embedding excluded: query_vector given); "
        "insert_per_s excludes embedding compute (vectors precomputed) but includes history and "
        "embedding-cache writes",
        "machine": host,
    }
    return out


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
    p.add_argument("--db", default=None, help="database path, or :memory: (default: a file in a temp dir)")
    p.add_argument("--warmup", type=int, default=10, help="untimed queries per method before timing")
    p.add_argument("--vocab", type=int, default=20_000, help="synthetic content words")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--dim", type=int, default=DIM, help="vector size (384 = MiniLM, 768 = the mpnet embedder)"
    )
    p.add_argument("--quick", action="store_true", help="smoke run: sizes 1000,10000 and 50 queries")
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
    if min(args.sizes) <= args.top_k:
        p.error(f"every size must exceed --top-k ({args.top_k})")
    if args.queries < 1 or args.batch < 1:
        p.error("--queries and --batch must be at least 1")
    if args.db not in (None, ":memory:") and Path(args.db).exists():
        p.error(f"{args.db} exists; pass a new path (the benchmark fills the database itself)")
    return args


async def run(args: argparse.Namespace, db: str) -> dict[str, Any]:
    t0, load_start = time.perf_counter(), load_avg()
    corpus = make_corpus(args.seed, max(args.sizes), args.vocab)
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
            size = (
                sum(p.stat().st_size for p in Path(db).parent.glob(Path(db).name + "*"))
                if db != ":memory:"
                else 0
            )
            row["db_mb"] = round(size / 2**20, 1) if size else None
            qs = make_queries(corpus, n, args.queries, args.seed)
            figures, ref = await bench_store(mem, qs, n, args.top_k, args.warmup)
            row.update(figures)
            if n in args.langgraph_sizes:
                row["langgraph"] = bench_langgraph(corpus, qs, n, args.top_k, args.langgraph_queries, ref)
            rows.append(row)
            print_size(row, args.batch)
            if args.profile and n == args.sizes[-1]:
                await profile_search(mem, qs, args.top_k)
    finally:
        await mem.close()
    out = summary(rows, done / insert_s, args, machine(load_start))
    out["total_s"] = round(time.perf_counter() - t0, 1)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    global DIM
    args = parse_args(argv)
    DIM = args.dim
    with tempfile.TemporaryDirectory(prefix="memrl-bench-") as tmp:
        db = args.db or os.path.join(tmp, "memories.db")
        out = asyncio.run(run(args, db))
    t = out["targets"]
    print(
        f"\ntargets at n={out['n']:,}: dense within 2x numpy: {t['dense_within_2x_numpy_at_n']} "
        f"({out['dense_vs_numpy']}x); hybrid p50 < 50 ms: {t['hybrid_p50_under_50ms_at_n']} "
        f"({out['hybrid_p50_ms']} ms); dense faster than LangGraph at n={out['langgraph_n']}: "
        f"{t['dense_faster_than_langgraph']}; total {out['total_s']} s",
        flush=True,
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
