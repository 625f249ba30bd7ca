"""memrl's store beside the embedded stores a user would pick instead, on the same texts and vectors (issue 59).

Each store runs in its persistent on-disk mode, in a process of its own (so its resident memory is its own),
on bench/store_data.py's items and queries (the texts and 384-d vectors bench/store.py uses) at ``--n`` items:

- ``memrl``: one SQLite file, ``AsyncMemory`` with the vectors handed in (HNSW graph above 20k items, saved
  beside the file), dense, hybrid and BM25 search with the default options;
- ``chromadb`` (1.5.9, ``PersistentClient``, HNSW, cosine): dense only (its ``$contains`` document filter
  does not rank, so no full-text row);
- ``lancedb`` (0.40.0, a Lance directory): dense by flat scan (no vector index: exact, what a table of this
  size answers without ``create_index``), full-text by its native FTS index, hybrid by its RRF reranker;
- ``qdrant`` (qdrant-client 1.20.0 in local mode, ``QdrantClient(path=...)``: the client's own embedded store,
  a brute-force scan persisted in SQLite; the server's HNSW and text index are not in it): dense only;
- ``sqlite-vec`` (0.1.9, a ``vec0`` table: brute-force KNN in one SQLite file), with FTS5 BM25 beside it in the
  same file for full-text. It is a loadable extension: a Python whose ``sqlite3`` was built without
  ``enable_load_extension`` (this project's pyenv 3.11 is one) loads it through ``apsw`` (its own SQLite, in
  the ``peers`` extra), as sqlite-vec's documentation suggests; without either the row says why it is skipped.

Per store: insert rate (items/s, the index build included where the store builds at insert; memrl's graph is
built at its first search, reported as ``build_s``), dense p50/p99 and recall@10 against numpy's exact top 10,
full-text and hybrid p50 where the store has them, the first dense query of a new process (import, open and
query, timed in a subprocess), the size on disk and the process's resident memory (after the data was
generated, and its peak). A store that runs past ``--timeout`` is reported with the stage it was in, the items
it had inserted and their rate (its progress lines on stderr). A store whose package is missing is reported as skipped with the extra that installs
it (``pip install 'memrl[peers]'``). The last line of stdout is one JSON object with every row.

Run::

    .venv/bin/python -m bench.peers --n 10000
    .venv/bin/python -m bench.peers --n 100000 --queries 200 --peers memrl,lancedb,sqlite-vec
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.store_data import (
    DIM,
    NAMESPACE,
    TYPES,
    LookupEmbedder,
    make_corpus,
    make_queries,
    numpy_top,
    resident_mb,
    stats,
)

PEERS = ("memrl", "chromadb", "lancedb", "qdrant", "sqlite-vec")
MODULE = {"memrl": "memrl", "chromadb": "chromadb", "lancedb": "lancedb", "qdrant": "qdrant_client",
          "sqlite-vec": "sqlite_vec"}  # fmt: skip
BATCH = 2000


def disk_mb(path: Path) -> float:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return round(sum(p.stat().st_size for p in files) / 1e6, 1)


def fts_match(text: str) -> str:
    """An FTS5 query: any of the query's words (each quoted)."""
    return " OR ".join('"' + w.replace('"', "") + '"' for w in text.split())


# ---------------------------------------------------------------------- one store each
PROGRESS = "peers-progress"


def progress(stage: str, t0: float, **fields: Any) -> None:
    """One line on stderr saying how far a store's measuring process got (``stage``, seconds since ``t0``,
    ``fields``): what a timed-out row reports (:func:`last_progress`)."""
    line = {"stage": stage, "s": round(time.perf_counter() - t0, 1), **fields}
    print(PROGRESS, json.dumps(line), file=sys.stderr, flush=True)


def last_progress(stderr: bytes | str | None) -> dict[str, Any] | None:
    """The last :func:`progress` line of a child's stderr (bytes when :class:`subprocess.TimeoutExpired`
    carries it), or None."""
    text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr or ""
    lines = [ln for ln in text.splitlines() if ln.startswith(PROGRESS + " ")]
    return json.loads(lines[-1][len(PROGRESS) + 1 :]) if lines else None


class Peer:
    """A store on disk at ``path``: ``insert`` (ids are item indices), ``dense``/``text``/``hybrid`` queries
    answering item indices best first (``text``/``hybrid`` None when the store has none), ``open`` again.
    ``insert`` calls :meth:`inserted` after each batch."""

    text_search = hybrid_search = False

    def __init__(self, path: Path) -> None:
        self.path = path
        self.t0 = time.perf_counter()

    def inserted(self, done: int, total: int) -> None:
        progress("insert", self.t0, inserted=done, of=total)


class MemrlPeer(Peer):
    text_search = hybrid_search = True

    def open(self, texts: Sequence[str] = (), vectors: np.ndarray | None = None) -> None:
        from memrl.memory.facade.memory import AsyncMemory

        vecs = np.zeros((0, DIM), np.float32) if vectors is None else vectors
        self.loop = asyncio.new_event_loop()
        emb = LookupEmbedder(list(texts), vecs, name="bench-lookup-0")
        self.mem = AsyncMemory(str(self.path), embedder=emb, namespace=NAMESPACE)

    def insert(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        from memrl.memory.store.base import NewItem

        self.open(texts, vectors)
        for b in range(0, len(texts), 500):
            items = [NewItem(texts[i], type=TYPES[i % 3], session=f"s{i // 20}", id=f"m{i}")
                     for i in range(b, min(len(texts), b + 500))]  # fmt: skip
            self.loop.run_until_complete(self.mem.add_many(items, namespace=NAMESPACE))
            self.inserted(min(len(texts), b + 500), len(texts))

    def _search(self, text: str, qv: np.ndarray | None, mode: str, k: int, **options: Any) -> list[int]:
        hits = self.loop.run_until_complete(
            self.mem.search(text, top_k=k, mode=mode, query_vector=qv, **options)
        )
        return [int(h.item.id[1:]) for h in hits]

    def dense(self, qv: np.ndarray, k: int, text: str = "") -> list[int]:
        """The store's vector search, as the peers' dense rows are: memrl's retrieval features off
        (:data:`memrl.memory.search.PLAIN`). Default dense mode re-scores its candidates (the neighbour
        window, date fit, priors), so its top 10 is not the cosine top 10 by design."""
        from memrl.memory.search import PLAIN

        return self._search(text or "query", qv, "dense", k, **PLAIN)

    def text(self, text: str, k: int) -> list[int]:
        return self._search(text, None, "bm25", k)

    def hybrid(self, text: str, qv: np.ndarray, k: int) -> list[int]:
        return self._search(text, qv, "hybrid", k)


class ChromaPeer(Peer):
    def open(self) -> None:
        import chromadb

        self.client = chromadb.PersistentClient(path=str(self.path))
        self.col = self.client.get_or_create_collection("bench", configuration={"hnsw": {"space": "cosine"}})

    def insert(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        self.open()
        for b in range(0, len(texts), BATCH):
            e = min(len(texts), b + BATCH)
            self.col.add(
                ids=[str(i) for i in range(b, e)], embeddings=vectors[b:e], documents=list(texts[b:e])
            )
            self.inserted(e, len(texts))

    def dense(self, qv: np.ndarray, k: int, text: str = "") -> list[int]:
        got = self.col.query(query_embeddings=qv.reshape(1, -1), n_results=k, include=[])
        return [int(i) for i in got["ids"][0]]


class LancePeer(Peer):
    text_search = hybrid_search = True

    def open(self) -> None:
        import lancedb

        self.db = lancedb.connect(str(self.path))
        self.table = self.db.open_table("bench") if "bench" in self.db.table_names() else None

    def insert(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        import pyarrow as pa

        self.open()
        for b in range(0, len(texts), BATCH * 5):
            e = min(len(texts), b + BATCH * 5)
            flat = pa.array(vectors[b:e].reshape(-1), type=pa.float32())
            batch = pa.table({"id": pa.array(range(b, e), pa.int64()), "text": list(texts[b:e]),
                              "vector": pa.FixedSizeListArray.from_arrays(flat, DIM)})  # fmt: skip
            if self.table is None:
                self.table = self.db.create_table("bench", batch)
            else:
                self.table.add(batch)
            self.inserted(e, len(texts))
        self.table.create_fts_index("text")

    def dense(self, qv: np.ndarray, k: int, text: str = "") -> list[int]:
        got = self.table.search(qv, vector_column_name="vector").metric("cosine").limit(k).select(["id"])
        return got.to_arrow()["id"].to_pylist()

    def text(self, text: str, k: int) -> list[int]:
        return self.table.search(text, query_type="fts").limit(k).select(["id"]).to_arrow()["id"].to_pylist()

    def hybrid(self, text: str, qv: np.ndarray, k: int) -> list[int]:
        q = self.table.search(query_type="hybrid").vector(qv).text(text).limit(k).select(["id"])
        return q.to_arrow()["id"].to_pylist()


class QdrantPeer(Peer):
    def open(self) -> None:
        from qdrant_client import QdrantClient

        self.client = QdrantClient(path=str(self.path))

    def insert(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        from qdrant_client import models

        self.open()
        self.client.create_collection(
            "bench", vectors_config=models.VectorParams(size=DIM, distance="Cosine")
        )
        for b in range(0, len(texts), BATCH):
            e = min(len(texts), b + BATCH)
            self.client.upload_collection("bench", vectors=vectors[b:e], payload=[{"text": t} for t in texts[b:e]],
                                          ids=list(range(b, e)))  # fmt: skip
            self.inserted(e, len(texts))

    def dense(self, qv: np.ndarray, k: int, text: str = "") -> list[int]:
        return [int(p.id) for p in self.client.query_points("bench", query=qv.tolist(), limit=k).points]


def can_load_extensions() -> bool:
    """Whether this Python's ``sqlite3`` loads extensions (else sqlite-vec goes through apsw)."""
    return hasattr(sqlite3.Connection, "enable_load_extension")


def vec_connection(path: Path) -> Any:
    """A connection to ``path`` with sqlite-vec loaded: the standard ``sqlite3`` where it can load
    extensions, else ``apsw`` (both take ``with conn:`` as one transaction, ``execute`` and ``executemany``)."""
    import sqlite_vec

    if can_load_extensions():
        db = sqlite3.connect(str(path))
        db.enable_load_extension(True)
        sqlite_vec.load(db)
    else:
        import apsw

        db = apsw.Connection(str(path))
        db.enable_load_extension(True)
        db.load_extension(sqlite_vec.loadable_path())
    db.enable_load_extension(False)
    return db


class SqliteVecPeer(Peer):
    text_search = True

    def open(self) -> None:
        self.db = vec_connection(self.path)

    def insert(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        self.open()
        self.db.execute(f"CREATE VIRTUAL TABLE v USING vec0 (embedding float[{DIM}] distance_metric=cosine)")
        self.db.execute("CREATE VIRTUAL TABLE t USING fts5 (text, tokenize='porter unicode61')")
        for b in range(0, len(texts), BATCH):
            e = min(len(texts), b + BATCH)
            with self.db:  # one transaction per batch
                self.db.executemany("INSERT INTO v (rowid, embedding) VALUES (?, ?)",
                                    [(i, vectors[i].astype(np.float32).tobytes()) for i in range(b, e)])  # fmt: skip
                self.db.executemany(
                    "INSERT INTO t (rowid, text) VALUES (?, ?)", [(i, texts[i]) for i in range(b, e)]
                )
            self.inserted(e, len(texts))

    def dense(self, qv: np.ndarray, k: int, text: str = "") -> list[int]:
        rows = self.db.execute(
            "SELECT rowid FROM v WHERE embedding MATCH ? AND k = ? ORDER BY distance",
            [np.asarray(qv, dtype=np.float32).tobytes(), k],
        ).fetchall()
        return [r[0] for r in rows]

    def text(self, text: str, k: int) -> list[int]:
        rows = self.db.execute(
            "SELECT rowid FROM t WHERE t MATCH ? ORDER BY rank LIMIT ?", [fts_match(text), k]
        )
        return [r[0] for r in rows.fetchall()]


CLASSES = {"memrl": MemrlPeer, "chromadb": ChromaPeer, "lancedb": LancePeer, "qdrant": QdrantPeer,
           "sqlite-vec": SqliteVecPeer}  # fmt: skip


def store_path(tmp: Path, name: str) -> Path:
    return tmp / (name + (".db" if name in ("memrl", "sqlite-vec") else ""))


def measure(name: str, tmp: Path, n: int, queries: int, k: int, warmup: int) -> dict[str, Any]:
    """Insert and search one store (run in a process of its own: ``--one``)."""
    corpus = make_corpus(0, n, 20_000)
    qs = make_queries(corpus, n, queries, 0)
    truth = [numpy_top(corpus.vectors[:n], qs.vectors[i], k).tolist() for i in range(queries)]
    row: dict[str, Any] = {"peer": name, "n": n, "rss_data_mb": resident_mb()["now"]}
    peer = CLASSES[name](store_path(tmp, name))
    t0 = peer.t0 = time.perf_counter()
    peer.insert(corpus.texts[:n], corpus.vectors[:n])
    row["insert_per_s"] = round(n / (time.perf_counter() - t0))
    progress("build", peer.t0, inserted=n, of=n, insert_per_s=row["insert_per_s"])
    t0 = time.perf_counter()
    peer.dense(qs.vectors[0], k, qs.texts[0])  # memrl builds its graph (and dense matrix) here
    row["build_s"] = round(time.perf_counter() - t0, 2)
    progress("queries", peer.t0, inserted=n, of=n, insert_per_s=row["insert_per_s"], build_s=row["build_s"])
    runs = {"dense": lambda i: peer.dense(qs.vectors[i], k, qs.texts[i])}
    if peer.text_search:
        runs["text"] = lambda i: peer.text(qs.texts[i], k)
    if peer.hybrid_search:
        runs["hybrid"] = lambda i: peer.hybrid(qs.texts[i], qs.vectors[i], k)
    for i in range(min(warmup, queries)):
        for run in runs.values():
            run(i)
    times: dict[str, list[float]] = {m: [] for m in runs}
    got: dict[str, list[list[int]]] = {m: [] for m in runs}
    for i in range(queries):
        for m, run in runs.items():
            t = time.perf_counter()
            got[m].append(run(i))
            times[m].append((time.perf_counter() - t) * 1e3)
    for m in runs:
        s = stats(times[m])
        row[f"{m}_p50_ms"], row[f"{m}_p99_ms"] = s["p50_ms"], s.get("p99_ms", s.get("p95_ms"))
        row[f"{m}_hit_at_{k}"] = round(
            float(np.mean([t in g for t, g in zip(qs.targets, got[m], strict=True)])), 3
        )
    row["dense_recall_at_k"] = round(
        float(np.mean([len(set(g) & set(t)) / len(t) for g, t in zip(got["dense"], truth, strict=True)])), 4
    )
    row["rss_mb"] = resident_mb()
    return row


COLD = """
import sys, time, json
t0 = time.perf_counter()
from bench import peers
import numpy as np
name, path, dim = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = peers.CLASSES[name](peers.Path(path))
__import__(peers.MODULE[name])
t1 = time.perf_counter()
p.open()
hits = p.dense(np.ones(dim, dtype=np.float32) / dim ** 0.5, 10, "cold query")
t2 = time.perf_counter()
print(json.dumps({"cold_import_ms": round((t1 - t0) * 1e3, 1), "cold_first_dense_ms": round((t2 - t1) * 1e3, 1),
                  "cold_hits": len(hits)}))
"""


def timed_out(name: str, timeout: int, got: dict[str, Any] | None) -> dict[str, Any]:
    """The row of a store whose measuring process ran past ``timeout``: how far it got (its last
    :func:`progress` line), with the insert rate over the items it inserted when it was still inserting."""
    row: dict[str, Any] = {"peer": name, "failed": f"timed out after {timeout} s (insert and queries)"}
    if got:
        row["timed_out_in"], row["inserted"], row["of"] = got["stage"], got["inserted"], got["of"]
        row["insert_per_s"] = got.get("insert_per_s") or round(got["inserted"] / max(got["s"], 1e-3))
        if "build_s" in got:
            row["build_s"] = got["build_s"]
    return row


def run_one(name: str, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One store's row: measured in a child process, then its cold first query in another."""
    if importlib.util.find_spec(MODULE[name]) is None:
        return {"peer": name, "skipped": f"{MODULE[name]} is not installed: pip install 'memrl[peers]'"}
    if name == "sqlite-vec" and not can_load_extensions() and importlib.util.find_spec("apsw") is None:
        return {"peer": name, "skipped": "this Python's sqlite3 cannot load extensions (built without them) "
                "and apsw is not installed: pip install 'memrl[peers]'"}  # fmt: skip
    cmd = [sys.executable, "-m", "bench.peers", "--one", name, "--dir", str(tmp), "--n", str(args.n),
           "--queries", str(args.queries), "--top-k", str(args.top_k), "--warmup", str(args.warmup)]  # fmt: skip
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    except subprocess.TimeoutExpired as exc:
        return timed_out(name, args.timeout, last_progress(exc.stderr))
    if done.returncode:
        return {"peer": name, "failed": done.stderr.strip().splitlines()[-1:] or ["?"]}
    row = json.loads(done.stdout.strip().splitlines()[-1])
    cold = subprocess.run([sys.executable, "-c", COLD, name, str(store_path(tmp, name)), str(DIM)],
                          capture_output=True, text=True)  # fmt: skip
    if cold.returncode == 0:
        row.update(json.loads(cold.stdout.strip().splitlines()[-1]))
    else:
        row["cold_failed"] = (cold.stderr.strip().splitlines() or ["?"])[-1]
    row["disk_mb"] = disk_mb(tmp)  # the store's own folder: memrl's graph file beside its database too
    return row


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=10_000, help="items")
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--timeout", type=int, default=1800, help="seconds one store's measuring process may take")
    p.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated, of {', '.join(PEERS)}")
    p.add_argument("--dir", type=Path, help="where the stores are written (default: a temp dir, removed)")
    p.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one store in this process
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one, args.dir, args.n, args.queries, args.top_k, args.warmup)))
        return
    names = [s for s in args.peers.split(",") if s]
    unknown = set(names) - set(PEERS)
    if unknown:
        p.error(f"unknown peers {sorted(unknown)}; choose from {', '.join(PEERS)}")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        rows = []
        for name in names:
            (Path(tmp) / name).mkdir()
            row = run_one(name, Path(tmp) / name, args)
            rows.append(row)
            print(" ".join(f"{k}={v}" for k, v in row.items()), file=sys.stderr, flush=True)
    print(
        json.dumps(
            {"bench": "peers", "n": args.n, "queries": args.queries, "top_k": args.top_k, "rows": rows}
        )
    )


if __name__ == "__main__":
    main()
