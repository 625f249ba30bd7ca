"""Which ANN library backs the in-process dense index: build time, p50 query and recall@10 against exact.

Random but clustered unit vectors (``--clusters`` Gaussian centres, noise around each), queries drawn the
same way but not stored. Every candidate list is re-scored exactly (as :class:`memrl.memory.index.dense.DenseIndex`
does), so recall@10 is that of the final top 10 against the exact top 10. Also the exact (numpy) p50 at
several sizes, which places ``dense_backend="auto"``'s threshold: below it exact is as fast as ANN and
needs no build. hnswlib is not measured: it has no wheel on the registry (sdist only).

    flock /work/cpu.lock nice -n 10 python -m bench.ann_choice --n 100000     # prints one JSON line last
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def clustered(n: int, dim: int, clusters: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    x = centres[rng.integers(0, clusters, n)] + 0.9 * rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def exact_top(x: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    s = x @ q
    idx = np.argpartition(-s, k - 1)[:k]
    return idx[np.argsort(-s[idx], kind="stable")]


def rescore(x: np.ndarray, q: np.ndarray, cand: np.ndarray, k: int) -> np.ndarray:
    cand = cand[cand >= 0]
    s = x[cand] @ q
    return cand[np.argsort(-s, kind="stable")[:k]]


def timed(search, x: np.ndarray, queries: np.ndarray, truth: list[np.ndarray], k: int) -> dict:
    lat, hit = [], 0
    for q, t in zip(queries, truth, strict=True):
        t0 = time.perf_counter()
        got = rescore(x, q, search(q), k)
        lat.append(time.perf_counter() - t0)
        hit += len(set(got.tolist()) & set(t.tolist()))
    return {
        "p50_ms": round(1000 * float(np.median(lat)), 3),
        "p99_ms": round(1000 * float(np.percentile(lat, 99)), 3),
        "recall10": round(hit / (k * len(queries)), 4),
    }


class _Progress(dict):
    """Each figure also printed to stderr as it comes, so a run cut short still tells what it measured."""

    def __setitem__(self, key: str, value: dict) -> None:
        print(json.dumps({key: value}), file=sys.stderr, flush=True)
        super().__setitem__(key, value)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--clusters", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument(
        "--fetch", type=int, default=40, help="candidates asked of the ANN index, re-scored exactly"
    )
    ap.add_argument("--threads", type=int, default=2, help="build threads (queries run on one)")
    args = ap.parse_args()
    k = 10
    x = clustered(args.n, args.dim, args.clusters, 0)
    rng = np.random.default_rng(1)  # queries: the same centres (seed 0), fresh noise
    centres = np.random.default_rng(0).standard_normal((args.clusters, args.dim)).astype(np.float32)
    queries = centres[rng.integers(0, args.clusters, args.queries)]
    queries = queries + 0.9 * rng.standard_normal(queries.shape).astype(np.float32)
    queries = (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)
    truth = [exact_top(x, q, k) for q in queries]
    out: dict = {"n": args.n, "dim": args.dim, "clusters": args.clusters, "fetch": args.fetch, "k": k}

    exact = {}
    for size in [s for s in (1000, 5000, 10_000, 20_000, 50_000, 100_000, 200_000, 1_000_000) if s <= args.n]:
        xs = x[:size]
        lat = []
        for q in queries[:100]:
            t0 = time.perf_counter()
            exact_top(xs, q, k)
            lat.append(time.perf_counter() - t0)
        exact[size] = round(1000 * float(np.median(lat)), 3)
    out["exact_p50_ms"] = exact
    print(json.dumps({"exact_p50_ms": exact}), file=sys.stderr, flush=True)

    import faiss

    faiss.omp_set_num_threads(args.threads)
    libs: dict = _Progress()
    t0 = time.perf_counter()
    hnsw = faiss.IndexHNSWFlat(args.dim, 32, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = 64
    hnsw.add(x)
    build = time.perf_counter() - t0
    faiss.omp_set_num_threads(1)
    for ef, fetch in ((48, args.fetch), (96, args.fetch), (200, 200)):  # 200: what hybrid search asks
        hnsw.hnsw.efSearch = ef
        r = timed(lambda q, f=fetch: hnsw.search(q[None], f)[1][0], x, queries, truth, k)
        libs[f"faiss_hnsw32_ef{ef}_fetch{fetch}"] = {"build_s": round(build, 2), **r}

    faiss.omp_set_num_threads(args.threads)
    t0 = time.perf_counter()  # the same graph over 8-bit codes: a quarter of the memory, re-scored exactly
    sq = faiss.IndexHNSWSQ(args.dim, faiss.ScalarQuantizer.QT_8bit, 32, faiss.METRIC_INNER_PRODUCT)
    sq.hnsw.efConstruction = 64
    sq.train(x)
    sq.add(x)
    build = time.perf_counter() - t0
    faiss.omp_set_num_threads(1)
    for ef in (48, 96):
        sq.hnsw.efSearch = ef
        r = timed(lambda q: sq.search(q[None], args.fetch)[1][0], x, queries, truth, k)
        libs[f"faiss_hnsw32_sq8_ef{ef}"] = {"build_s": round(build, 2), **r}

    faiss.omp_set_num_threads(args.threads)
    t0 = time.perf_counter()
    nlist = int(4 * np.sqrt(args.n))
    quant = faiss.IndexFlatIP(args.dim)
    ivf = faiss.IndexIVFFlat(quant, args.dim, nlist, faiss.METRIC_INNER_PRODUCT)
    ivf.train(x[np.random.default_rng(2).permutation(args.n)[: min(args.n, 40 * nlist)]])
    ivf.add(x)
    build = time.perf_counter() - t0
    faiss.omp_set_num_threads(1)
    for nprobe in (8, 32):
        ivf.nprobe = nprobe
        r = timed(lambda q: ivf.search(q[None], args.fetch)[1][0], x, queries, truth, k)
        libs[f"faiss_ivf{nlist}_nprobe{nprobe}"] = {"build_s": round(build, 2), **r}

    from usearch.index import Index

    t0 = time.perf_counter()
    us = Index(ndim=args.dim, metric="ip", dtype="f32", connectivity=16, expansion_add=128)
    us.add(np.arange(args.n), x, threads=args.threads)
    build = time.perf_counter() - t0
    for ef in (48, 96):
        us.expansion_search = ef
        r = timed(lambda q: us.search(q, args.fetch, threads=1).keys.astype(np.int64), x, queries, truth, k)
        libs[f"usearch_m16_ef{ef}"] = {"build_s": round(build, 2), **r}
    out["ann"] = libs
    print(json.dumps(out))


if __name__ == "__main__":
    main()
