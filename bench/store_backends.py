"""What bench/store.py measures across back-ends: where each store lives, concurrent writers, LoCoMo recall,
and the side-by-side table.

- :func:`backend_dbs`: a fresh store per back-end: SQLite in a temp file; Postgres as a new database on a
  throwaway local server (pgserver's binaries, :mod:`memrl.memory.backends.postgres.local`) or on ``--pg-url``;
- :func:`concurrent_writers`: W writer *processes* (1, 4, 16), each with its own store on the same
  database and its own namespace (a tenant), adding small batches (``add_many`` of 10, the service's
  shape) after a common start barrier; items/s over the whole span. SQLite lets one writer at a time
  (the file lock); Postgres one per namespace;
- :func:`locomo_recall`: ``memrl eval retrieval`` on LoCoMo (default settings, MiniLM through the shared
  embedding cache) into the back-end's store: recall@10 per mode. The ranking code is shared, so the
  figures must match;
- :func:`print_side_by_side`.

Not run by itself: ``.venv/bin/python -m bench.store`` (see its docstring).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any


@contextmanager
def backend_dbs(
    backends: Sequence[str], pg_url: str | None, pg_settings: dict[str, str] | None = None
) -> Iterator[Any]:
    """Yields ``make(backend, name) -> db``: a new, empty store location for ``backend`` each call (a local
    Postgres server, started with ``pg_settings`` over the defaults here, unless ``pg_url`` names one)."""
    from memrl.memory.backends.postgres.local import LocalPostgres

    server = None
    with tempfile.TemporaryDirectory(prefix="memrl-bench-") as tmp:
        if "postgres" in backends and pg_url is None:
            settings = {"shared_buffers": "512MB", "max_wal_size": "4GB", "maintenance_work_mem": "4GB"}
            server = LocalPostgres(settings={**settings, **(pg_settings or {})}).start()

        def make(backend: str, name: str) -> str:
            if backend == "sqlite":
                return os.path.join(tmp, f"{name}.db")
            if server is not None:
                return server.create_database(name)
            import psycopg

            with psycopg.connect(pg_url, autocommit=True) as c:
                c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                c.execute(f'CREATE DATABASE "{name}"')
            return pg_url.rsplit("/", 1)[0] + "/" + name

        try:
            yield make
        finally:
            if server is not None:
                server.stop()


def _writer(db: str, ns: str, items: int, batch: int, barrier: Any, out: Any) -> None:
    from memrl.memory.embedders.providers import HashingEmbedder
    from memrl.memory.facade.memory import AsyncMemory

    async def go() -> tuple[float, float]:
        m = AsyncMemory(db, embedder=HashingEmbedder(384), busy_timeout=120)
        await m.add("warm up", namespace=ns)  # connection, schema and analyzer ready before the clock
        barrier.wait()
        t0 = time.time()
        for b in range(0, items, batch):
            await m.add_many(
                [f"{ns} writes fact {i} about tea and jazz" for i in range(b, b + batch)], namespace=ns
            )
        t1 = time.time()
        await m.close()
        return t0, t1

    out.put(asyncio.run(go()))


def concurrent_writers(db: str, writers: int, total: int, batch: int = 10) -> dict[str, Any]:
    """``writers`` processes adding ``total`` items in all (batches of ``batch``), one namespace each."""
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(writers), ctx.Queue()
    per = total // writers
    procs = [
        ctx.Process(target=_writer, args=(db, f"tenant{w}", per, batch, barrier, out)) for w in range(writers)
    ]
    for p in procs:
        p.start()
    spans = [out.get(timeout=1800) for _ in procs]
    for p in procs:
        p.join()
    wall = max(e for _, e in spans) - min(s for s, _ in spans)
    return {
        "writers": writers,
        "items": per * writers,
        "seconds": round(wall, 2),
        "items_per_s": round(per * writers / wall),
    }


async def locomo_recall(db: str) -> dict[str, Any]:
    """recall@10 per mode on LoCoMo (all conversations, default settings) built into ``db``."""
    from memrl.eval.retrieval import RetrievalConfig, aevaluate, load_conversations, open_memory

    config = RetrievalConfig(db_path=db)
    convs = load_conversations(config)
    memory = open_memory(config)
    t0 = time.perf_counter()
    try:
        report = await aevaluate(convs, config, memory=memory, progress=False)
    finally:
        await memory.close()
    return {
        "recall_at_10": {m: v["recall_at_k"]["10"] for m, v in report["modes"].items()},
        "n_questions": report["n_questions"],
        "seconds": round(time.perf_counter() - t0, 1),
    }


def print_side_by_side(results: dict[str, dict[str, Any]]) -> None:
    names = list(results)
    print("\n" + f"{'':<34}" + "".join(f"{n:>14}" for n in names), flush=True)

    def row(label: str, get: Any) -> None:
        vals = []
        for n in names:
            try:
                v = get(results[n])
            except (KeyError, TypeError, IndexError):
                v = None
            vals.append("-" if v is None else f"{v:,.3f}" if isinstance(v, float) else f"{v:,}")
        print(f"{label:<34}" + "".join(f"{v:>14}" for v in vals), flush=True)

    sizes = [r["n"] for r in results[names[0]]["per_size"]]
    for i, n in enumerate(sizes):
        row(f"insert items/s (to n={n:,})", lambda r, i=i: r["per_size"][i]["insert_per_s"])
        for mode in ("dense", "hybrid", "bm25"):
            for p in ("p50_ms", "p99_ms"):
                row(f"{mode} {p} at n={n:,}", lambda r, i=i, mode=mode, p=p: r["per_size"][i][mode][p])
        row(f"dense recall vs numpy at n={n:,}", lambda r, i=i: r["per_size"][i]["dense_recall_vs_numpy"])
    for w in sorted({c["writers"] for r in results.values() for c in r.get("concurrency", [])}):
        row(
            f"{w} concurrent writers items/s",
            lambda r, w=w: next(c["items_per_s"] for c in r["concurrency"] if c["writers"] == w),
        )
    for mode in ("dense", "bm25", "hybrid"):
        row(f"LoCoMo recall@10 {mode}", lambda r, mode=mode: r["locomo"]["recall_at_10"][mode])
