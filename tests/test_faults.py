"""Faults: corrupt or foreign files, a locked database, two processes writing, a crash mid-write."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from memrl.errors import StoreError
from memrl.memory.backends.sqlite.migrations import SCHEMA_VERSION
from memrl.memory.backends.sqlite.store import SQLiteStore
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.blocking import Memory

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_corrupt_file_is_named_in_the_error(tmp_path):
    bad = tmp_path / "notes.db"
    bad.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(StoreError, match=r"notes\.db is not a readable memrl database"):
        SQLiteStore(bad)
    assert bad.read_bytes().startswith(b"this is not sqlite")  # untouched


def test_foreign_sqlite_database_is_refused(tmp_path):
    other = tmp_path / "app.db"
    with sqlite3.connect(other) as c:
        c.execute("CREATE TABLE users (id INTEGER)")
    with pytest.raises(StoreError, match="another application"):
        SQLiteStore(other)


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "new.db"
    SQLiteStore(path).close()
    with sqlite3.connect(path) as c:
        c.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match="newer than this memrl"):
        SQLiteStore(path)


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(StoreError, match="is a directory"):
        SQLiteStore(tmp_path)


def test_locked_database_gives_clear_error_and_loses_nothing(tmp_path):
    path = tmp_path / "locked.db"
    with Memory(path, embedder=HashingEmbedder(32), busy_timeout=0.2) as m:
        m.add("before the lock")
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN EXCLUSIVE")
        t0 = time.monotonic()
        with pytest.raises(StoreError, match="locked by another writer"):
            m.add("during the lock")
        assert time.monotonic() - t0 < 5
        blocker.execute("ROLLBACK")
        blocker.close()
        m.add("after the lock")
        assert [i.content for i in m.list()] == ["before the lock", "after the lock"]
        assert [h.new_content for h in m.history()] == ["before the lock", "after the lock"]


_WRITER = textwrap.dedent(
    """
    import sys
    from memrl.memory.embedders.providers import HashingEmbedder
    from memrl.memory.facade.blocking import Memory
    path, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with Memory(path, embedder=HashingEmbedder(32), busy_timeout=30) as m:
        for i in range(n):
            m.add(f"{tag} fact number {i}")
            m.core_append(f"{tag}{i}")
            if i % 10 == 0:
                m.search(f"{tag} fact", mode="hybrid")
    """
)


def _spawn(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT, stderr=subprocess.PIPE)


def test_two_processes_write_the_same_file(tmp_path):
    path = str(tmp_path / "shared.db")
    SQLiteStore(path).close()
    procs = [_spawn(_WRITER, path, tag, "150") for tag in ("alpha", "beta")]
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err.decode()
    with Memory(path, embedder=HashingEmbedder(32)) as m:
        contents = {i.content for i in m.list()}
        assert len(contents) == 300
        assert {f"{t} fact number {i}" for t in ("alpha", "beta") for i in range(150)} == contents
        core = m.core().splitlines()  # read-modify-write in one transaction: no append lost
        assert sorted(core) == sorted(f"{t}{i}" for t in ("alpha", "beta") for i in range(150))
        assert len(m.history()) == 600
        assert len(m.search("beta fact number 149", mode="bm25", top_k=300)) == 300


_CRASHER = textwrap.dedent(
    """
    import sys
    from memrl.memory.embedders.providers import HashingEmbedder
    from memrl.memory.facade.blocking import Memory
    from memrl.memory.store.base import NewItem
    m = Memory(sys.argv[1], embedder=HashingEmbedder(32))
    batch = 0
    while True:  # killed from outside at a random moment
        m.add_many([NewItem(f"batch {batch} item {i}") for i in range(25)])
        batch += 1
        if batch == 3:
            print("ready", flush=True)
    """
)


@pytest.mark.parametrize("delay", [0.05, 0.3])
def test_crash_mid_write_leaves_whole_batches_only(tmp_path, delay):
    path = str(tmp_path / "crash.db")
    proc = subprocess.Popen([sys.executable, "-c", _CRASHER, path], cwd=ROOT, stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    with Memory(path, embedder=HashingEmbedder(32)) as m:
        conn = m.store._conn
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        items = m.list()
        assert len(items) >= 75 and len(items) % 25 == 0  # no half-written batch
        assert len(m.history()) == len(items)  # every item has its history entry, and nothing more
        batches = {int(i.content.split()[1]) for i in items}
        assert batches == set(range(len(items) // 25))
        m.add("life goes on")  # the file is writable after the crash
        assert m.count() == len(items) + 1
