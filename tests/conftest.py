"""Shared fixtures: a fresh memory on a real SQLite file with a deterministic embedder, and data paths."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from memrl.memory.embedder import Embedder
from memrl.memory.embedders import HashingEmbedder
from memrl.memory.facade import AsyncMemory, Memory

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


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.db"


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
