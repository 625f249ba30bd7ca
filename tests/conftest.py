"""Shared fixtures: a fresh memory on a real store (a SQLite file, or a database on a real Postgres server)
with a deterministic embedder, and data paths.

The store suite (:data:`STORE_SUITE`) runs every test on both back-ends: ``db_path`` (and ``amem``, ``mem``,
``new_db``) is a SQLite file for ``[sqlite]`` and a fresh database URL for ``[postgres]``. The Postgres
server starts once per session from the ``postgres`` extra (``pgserver``'s binaries,
:mod:`memrl.memory.backends.postgres.local`) on a free loopback port and stops at the end; without it the Postgres
cases skip, saying why.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memrl.memory.embedders.base import Embedder
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.blocking import Memory
from memrl.memory.facade.memory import AsyncMemory

ROOT = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path | None:
    """``$MEMRL_DATA_DIR`` or ``../shared/data`` beside the repository, if present."""
    env = os.environ.get("MEMRL_DATA_DIR")
    for cand in ([Path(env)] if env else []) + [ROOT.parent / "shared" / "data"]:
        if cand.is_dir():
            return cand
    return None


class CountingEmbedder(Embedder):
    """The hashing embedder, counting every text it embeds (to prove the cache works)."""

    def __init__(self, dim: int = 64) -> None:
        self.inner = HashingEmbedder(dim)
        self.name, self.dim = self.inner.name, dim
        self.seen: list[str] = []

    def embed(self, texts):
        self.seen.extend(texts)
        return self.inner.embed(texts)


#: Test modules whose every store-backed test runs on SQLite and on Postgres.
STORE_SUITE = frozenset(
    "test_store test_search test_search_modes test_transfer test_enrich test_rerank test_expand "
    "test_raw_builder test_retrieval_eval test_server_memory_api test_server_reliability test_search_isolation "
    "test_service_values test_service_isolation test_service_import test_service_properties test_history_as_of "
    "test_expiry ".split()
)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    module = metafunc.module.__name__.rsplit(".", 1)[-1]
    uses = {"db_path", "amem", "mem", "new_db"} & set(metafunc.fixturenames)
    if module in STORE_SUITE and uses:
        metafunc.parametrize("backend", ["sqlite", "postgres"], indirect=True)


@pytest.fixture
def backend(request) -> str:
    return getattr(request, "param", "sqlite")


@pytest.fixture(scope="session")
def pg_server():
    """One Postgres server for the session, with a template database already migrated; skips if none."""
    from memrl.memory.backends.postgres.local import LocalPostgres, bundled_bin_dir

    bin_dir, why = bundled_bin_dir()
    if bin_dir is None:
        pytest.skip(f"Postgres tests skipped: {why}")
    server = LocalPostgres().start()
    try:
        from memrl.memory.backends.postgres.store import PostgresStore

        PostgresStore(server.create_database("memrl_template")).close()
        yield server
    finally:
        server.stop()


@pytest.fixture
def new_db(backend: str, tmp_path: Path, request):
    """A factory of fresh, empty stores of the test's back-end: a SQLite path or a Postgres database URL."""
    made = iter(range(1_000_000))
    pg = request.getfixturevalue("pg_server") if backend == "postgres" else None

    def make(name: str = "memory") -> Any:
        n = next(made)
        if pg is None:
            return tmp_path / f"{name}-{n}.db"
        import psycopg

        db = f"t{uuid.uuid4().hex[:12]}"
        with psycopg.connect(pg.url(), autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{db}" TEMPLATE memrl_template')
        return pg.url(db)

    return make


@pytest.fixture
def db_path(backend: str, tmp_path: Path, new_db):
    """The test's store: ``tmp_path/memory.db`` on SQLite, a fresh database URL on Postgres."""
    return tmp_path / "memory.db" if backend == "sqlite" else new_db()


@pytest.fixture
async def amem(db_path: Path):
    m = AsyncMemory(db_path, embedder=HashingEmbedder(128), namespace="alice")
    yield m
    await m.close()


@pytest.fixture
def mem(db_path: Path):
    with Memory(db_path, embedder=HashingEmbedder(128), namespace="alice") as m:
        yield m


@pytest.fixture
def locomo_path() -> Path:
    d = shared_data_dir()
    if d is None or not (d / "locomo" / "locomo10.json").is_file():
        pytest.skip("LoCoMo data not found: set MEMRL_DATA_DIR or put ../shared/data beside the repo")
    return d / "locomo" / "locomo10.json"


def unit(v) -> np.ndarray:
    v = np.asarray(v, dtype=np.float32)
    return v / np.linalg.norm(v)
