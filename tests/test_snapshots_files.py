"""Snapshot files of the BM25 postings and the namespaces' terms (issue 59) that must not be used or written:
a damaged, foreign or outdated file is rebuilt from the store, never trusted (the results equal a rebuild's
and every text is analysed again); no file below ``SNAPSHOT_MIN`` live items or for an in-memory store; a
write that fails is logged and search goes on. Helpers: :mod:`tests.test_snapshots_lexical`."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.blocking import Memory
from memrl.memory.index.lexical import LexicalIndexes
from memrl.memory.search.terms import TermIndex
from tests.test_snapshots_lexical import (
    MIN,
    analysed,
    index_dir,
    low_min,
    memory,
    rebuilt,
    results,
    saved,
    snap,
    turns,
)

__all__ = ["analysed", "low_min"]  # fixtures


def damage_truncate(path):
    f = snap(path, "lexical")
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    f = snap(path, "terms")
    f.write_bytes(f.read_bytes()[:-100])


def damage_flip(path):
    for kind in ("lexical", "terms"):
        f = snap(path, kind)
        data = bytearray(f.read_bytes())
        data[-70] ^= 0x01  # inside the last array (post_tfs; the units' JSON), before its padding
        f.write_bytes(bytes(data))


def damage_foreign(path):
    """The files of another database with the same namespace, items, generation and seq numbers."""
    other = path.with_name("other.db")
    saved(other)
    shutil.rmtree(index_dir(path))
    shutil.copytree(index_dir(other), index_dir(path))


def damage_old_generation(path):
    """The files of this namespace's previous generation, put back after a reset and the same writes."""
    shutil.copytree(index_dir(path), path.with_name("old.index"))
    with memory(path) as m:
        m.reset()
        m.add_many(turns(80))
        results(m)
    shutil.rmtree(index_dir(path))
    path.with_name("old.index").rename(index_dir(path))


@pytest.mark.parametrize(
    "damage", [damage_truncate, damage_flip, damage_foreign, damage_old_generation], ids=lambda f: f.__name__
)
def test_a_bad_file_is_rebuilt_never_trusted(tmp_path, monkeypatch, analysed, damage):
    path = tmp_path / "m.db"
    saved(path)
    damage(path)
    want = rebuilt(path, monkeypatch)
    for k in analysed:
        analysed[k] = 0
    with memory(path) as m:
        assert results(m) == want
        live = m.count()
    assert analysed["bm25"] >= live and analysed["tagged"] >= live - live // 7  # rebuilt: every text again


def test_snapshot_min_is_honoured(tmp_path, monkeypatch):
    path = tmp_path / "m.db"
    with memory(path) as m:
        m.add_many(turns(MIN - 1))
        results(m)  # a cold build of MIN - 1 rows: no file
        assert not list(index_dir(path).glob("*.snap"))
        m.add_many(turns(3, seed=2))
        results(m)  # a catch-up of 3 rows: no file yet
        assert not list(index_dir(path).glob("*.snap"))
    assert len(list(index_dir(path).glob("*.snap"))) == 2  # on close: MIN live items or more
    shutil.rmtree(index_dir(path))
    with memory(path) as m:
        results(m)  # a cold build of MIN rows or more saves at once (a killed process leaves the files)
        assert len(list(index_dir(path).glob("*.snap"))) == 2
        m.add_many(turns(2, seed=8))
        shutil.rmtree(index_dir(path))
        results(m)
    assert len(list(index_dir(path).glob("*.snap"))) == 2  # changed since its last file: saved on close
    with memory(path) as m:
        results(m)  # loaded
        shutil.rmtree(index_dir(path))
    assert not index_dir(path).exists()  # unchanged since the file it loaded: not written again
    monkeypatch.setattr(LexicalIndexes, "SNAPSHOT_MIN", 1000)
    monkeypatch.setattr(TermIndex, "SNAPSHOT_MIN", 1000)
    shutil.rmtree(index_dir(path), ignore_errors=True)
    with memory(path) as m:
        results(m)
    assert not index_dir(path).exists()


def test_no_files_for_an_in_memory_store():
    with Memory(":memory:", embedder=HashingEmbedder(64), namespace="alice") as m:
        m.add_many(turns(40))
        results(m)
        m.aio.index.lexical.save_snapshots()
        m.aio.index.terms.save_snapshots()
    assert not Path(":memory:.index").exists()


def test_a_failed_save_is_logged_and_search_goes_on(tmp_path, monkeypatch, caplog):
    path = tmp_path / "m.db"
    index_dir(path).write_text("not a directory")  # every write of a file fails
    with caplog.at_level(logging.WARNING), memory(path) as m:
        m.add_many(turns(40))
        got = results(m)
    assert got == rebuilt_without_dir_check(path, monkeypatch)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("BM25 snapshot" in w for w in warned) and any("terms snapshot" in w for w in warned)


def rebuilt_without_dir_check(path, monkeypatch) -> dict:
    with monkeypatch.context() as mp:
        mp.setattr(LexicalIndexes, "SNAPSHOT_MIN", 10**9)
        mp.setattr(TermIndex, "SNAPSHOT_MIN", 10**9)
        with memory(path) as m:
            return results(m)


def test_an_index_of_a_replaced_namespace_is_not_saved(tmp_path):
    """An index that has not followed its namespace since it was dropped is not written (its stamp would
    name a history the store no longer has, or a generation it is not of)."""
    path = tmp_path / "m.db"
    with memory(path) as m:
        m.add_many(turns(40))
        results(m)
        shutil.rmtree(index_dir(path))
        m.aio.store.drop_namespace("alice")  # behind the index's back: no forget
        m.add_many(turns(40, seed=6))
        m.aio.index.lexical._saved.clear()
        m.aio.index.terms._saved.clear()
        m.aio.index.lexical.save_snapshots()
        m.aio.index.terms.save_snapshots()
        assert not list(index_dir(path).glob("*.snap"))


def test_a_clone_made_here_is_saved_on_close_only(tmp_path, monkeypatch):
    """An RL episode's copy is not written after its first search (a file per episode), only on close."""
    path = tmp_path / "m.db"
    saved(path)
    with memory(path) as m:
        m.clone("alice", "episode")
        got = results(m, "episode")
        assert len(list(index_dir(path).glob("*.snap"))) == 2  # alice's only
    assert len(list(index_dir(path).glob("*.snap"))) == 4
    with memory(path) as m:
        assert results(m, "episode") == got


def test_a_file_of_an_earlier_clone_is_not_taken_for_the_next(tmp_path, monkeypatch, analysed):
    """Only the generation tells these apart: an episode's copy saved at seq S (a history row of the
    source, which stays), then the source loses items and is cloned onto the episode again. Its rows all
    have seq <= S, so the old file brought forward would keep the lost items."""
    path = tmp_path / "m.db"
    saved(path)
    with memory(path) as m:
        m.clone("alice", "episode")
        results(m, "episode")
    assert len(list(index_dir(path).glob("*.snap"))) == 4
    with memory(path) as m:
        for item in m.list()[:3]:
            m.delete(item.id)
        m.clone("alice", "episode", overwrite=True)
    with monkeypatch.context() as mp:
        mp.setattr(LexicalIndexes, "SNAPSHOT_MIN", 10**9)
        mp.setattr(TermIndex, "SNAPSHOT_MIN", 10**9)
        aside = index_dir(path).rename(path.with_name("aside"))
        with memory(path) as m:
            want = results(m, "episode")
        aside.rename(index_dir(path))
    for k in analysed:
        analysed[k] = 0
    with memory(path) as m:
        assert results(m, "episode") == want
        assert m.count(namespace="episode") == 77
    assert analysed["bm25"] >= 77


def _rss_file_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("RssFile:"):
                return int(line.split()[1]) / 1024
    pytest.skip("no RssFile in /proc/self/status")


def test_a_mapped_array_is_checked_from_the_file_and_every_damaged_byte_is_caught(tmp_path):
    """A large array comes back memory-mapped, its checksum read from the file rather than through the map
    (the load maps none of its pages: a process holds only what its searches touch); a byte flipped anywhere
    in it, or a file cut short, still makes the whole snapshot unreadable."""
    import numpy as np

    from memrl.memory.index import snapshot

    big = np.arange(16 << 20, dtype=np.float32).reshape(-1, 256)  # 64 MB: mapped
    small = np.arange(10, dtype=np.int64)
    path = tmp_path / "x.snap"
    snapshot.write(path, {"kind": "test"}, {"big": big, "small": small})
    before = _rss_file_mb()
    meta, got = snapshot.read(path, {"kind": "test"})
    assert _rss_file_mb() - before < 16  # not the 64 MB a checksum through the map faults in
    assert isinstance(got["big"].base, np.memmap) or isinstance(got["big"], np.memmap)
    assert np.array_equal(got["big"], big) and np.array_equal(got["small"], small)
    assert snapshot.file_checksum(path, 0, path.stat().st_size) == snapshot.checksum(
        np.frombuffer(path.read_bytes(), dtype=np.uint8)
    )
    del got
    raw = bytearray(path.read_bytes())
    start = bytes(raw).find(big.tobytes()[:4096])
    assert start > 0
    for at in (start + big.nbytes // 2, start + big.nbytes - 1):  # in the middle of big, and its last byte
        damaged = tmp_path / f"d{at}.snap"
        raw[at] ^= 0x01
        damaged.write_bytes(raw)
        raw[at] ^= 0x01
        assert snapshot.read(damaged, {"kind": "test"}) is None
    cut = tmp_path / "cut.snap"
    cut.write_bytes(raw[:-4096])
    assert snapshot.read(cut, {"kind": "test"}) is None
