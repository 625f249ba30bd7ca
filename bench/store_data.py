"""The synthetic data and measuring helpers of the store benchmarks (bench/store.py, bench/store_backends.py).

Items: texts of 5-20 words from a Zipf-distributed vocabulary (real English function words, then ~20k
synthetic content words) with 1-3 topic words shared by a cluster, and unit vectors around 1,000 Gaussian
cluster centres; queries: a few words of a target item plus common words, and a vector near the target's.
Everything is seeded; item i is the same whatever the sizes. Not a benchmark itself: import it.
"""

from __future__ import annotations

import hashlib
import os
import platform
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import numpy as np

from memrl.memory.embedders.base import Embedder

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
        "p99_ms": round(float(np.percentile(a, 99)), 3),
        "mean_ms": round(float(a.mean()), 3),
    }


def item_index(key: str) -> int:
    return int(key[1:])  # "m123" -> 123


def overlap(got: Sequence[int], want: Sequence[int]) -> float:
    return len(set(got) & set(want)) / max(len(want), 1)


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


def server_memory_mb(url: str) -> float | None:
    """The proportional resident memory (PSS, MB: shared buffers counted once) of the Postgres server on this
    machine listening on ``url``'s port: its postmaster and every process it started; None for a server
    elsewhere (or without /proc)."""
    from urllib.parse import urlparse

    port = str(urlparse(url).port or 5432)
    procs: dict[int, tuple[int, list[str]]] = {}  # pid -> (parent pid, argv)
    for d in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
            with open(f"/proc/{d}/status", encoding="ascii", errors="replace") as f:
                ppid = next(int(line.split()[1]) for line in f if line.startswith("PPid:"))
        except (OSError, StopIteration, ValueError):
            continue
        procs[int(d)] = (ppid, argv)
    roots = [
        pid
        for pid, (_, argv) in procs.items()
        if argv
        and argv[0].endswith("/postgres")
        and "-p" in argv
        and argv[argv.index("-p") + 1 :][:1] == [port]
    ]
    if not roots:
        return None
    total = 0.0
    for pid, (ppid, _) in procs.items():
        if pid in roots or ppid in roots:
            try:
                with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
                    total += next(int(line.split()[1]) for line in f if line.startswith("Pss:")) / 1024
            except (OSError, StopIteration, ValueError):
                continue
    return round(total, 1)


def load_avg() -> float | None:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


_PEAK_MB = 0.0  # the largest resident size this process has reported


def resident_mb() -> dict[str, float]:
    """The process's resident memory now and at its peak (MB, Linux's VmRSS and VmHWM; zeros elsewhere):
    the corpus, the peers' copies and the in-process indexes; a Postgres server's own memory is not in it.
    The peak is at least every size reported before: the kernel updates VmHWM lazily, and it was read
    0.2 MB below an earlier VmRSS."""
    global _PEAK_MB
    got = {"VmRSS": 0.0, "VmHWM": 0.0}
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in got:
                    got[key] = int(value.split()[0]) / 1024  # kB
    except OSError:
        pass
    _PEAK_MB = max(_PEAK_MB, got["VmRSS"], got["VmHWM"])
    return {"now": round(got["VmRSS"], 1), "peak": round(_PEAK_MB, 1)}
