"""Snapshot files of the BM25 postings and of the namespaces' terms (issue 59), on a real SQLite file with a
deterministic embedder: after every kind of write made since a file was saved, a new process that loads it
searches exactly as one that rebuilds from the store (ids and scores, BM25 and hybrid); writes committed
after the last save (a killed process) are brought forward; a damaged, foreign or outdated file is rebuilt,
never trusted; and the load really happens in the good case (only the rows changed since are analysed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.blocking import Memory
from memrl.memory.index import lexical, snapshot
from memrl.memory.index.lexical import LexicalIndexes
from memrl.memory.search import terms as terms_mod
from memrl.memory.search.terms import TermIndex
from memrl.memory.store.base import NewItem

ROOT = Path(__file__).resolve().parents[1]
PLACES = "Lisbon Porto Boston Rome Tahoe Kyoto Oslo".split()
WORDS = "tea coffee hiking chess piano garden river mountain dog cat book film camping painting".split()
QUERIES = [
    "tea in Lisbon",
    "hiking mountain Porto",
    "piano film book",
    "dog river garden 2021",
    "chess coffee",
]
MIN = 20  # SNAPSHOT_MIN in these tests


def turns(n: int, seed: int = 0, start: int = 0) -> list[NewItem]:
    """Chat turns in sessions of 8; every 7th is a second view of the turn before (same unit); every 11th
    has no unit. A text never names a speaker: a rebuild tags a turn with every speaker of the namespace
    left out, a catch-up with those of the rows it reads only, in a warm process as after a load."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(start, start + n):
        speaker = ("Ann", "Ben")[i % 2]
        body = " ".join(rng.choice(WORDS, 5)) + f" near {rng.choice(PLACES)} in {2015 + i % 9} note{seed}x{i}"
        unit = f"t{i - 1}" if i % 7 == 6 else f"t{i}"
        meta = {"speaker": speaker, "text": f"{speaker}: {body}"}
        if i % 11:
            meta["unit"] = unit
        out.append(NewItem(f"{speaker}: {body}", "episodic", meta, session=f"s{i // 8}", id=f"i{seed}-{i}"))
    return out


@pytest.fixture(autouse=True)
def low_min(monkeypatch):
    monkeypatch.setattr(LexicalIndexes, "SNAPSHOT_MIN", MIN)
    monkeypatch.setattr(TermIndex, "SNAPSHOT_MIN", MIN)


@pytest.fixture
def analysed(monkeypatch):
    """Texts tokenized for BM25 and texts analysed for terms (content terms, tagger), by the real code."""
    seen = {"bm25": 0, "terms": 0, "tagged": 0}
    real_counts, real_terms, real_tagger = lexical.term_counts, terms_mod.content_terms, terms_mod.tagger_of

    def counts(text):
        seen["bm25"] += 1
        return real_counts(text)

    def content_terms(text):
        seen["terms"] += 1
        return real_terms(text)

    def tagger_of(name):
        tag = real_tagger(name)

        def run(texts, skip):
            seen["tagged"] += len(texts)
            return tag(texts, skip)

        return run

    monkeypatch.setattr(lexical, "term_counts", counts)
    monkeypatch.setattr(terms_mod, "content_terms", content_terms)
    monkeypatch.setattr(terms_mod, "tagger_of", tagger_of)
    return seen


def memory(path) -> Memory:
    return Memory(str(path), embedder=HashingEmbedder(64), namespace="alice")


def results(m: Memory, ns: str = "alice") -> dict:
    """Every query's BM25 and hybrid hits (ids and scores), the lexical index's own top list and the
    namespace's terms: what a loaded index must equal."""
    out: dict = {}
    for q in QUERIES:
        for mode in ("bm25", "hybrid"):
            hits = m.search(q, mode=mode, top_k=10, namespace=ns)
            out[q, mode] = [(h.item.id, h.score, h.bm25_score, h.dense_score) for h in hits]
        out[q, "lexical"] = m.aio.index.lexical.top(ns, q, 30)
    nt = m.aio.index.terms.get(ns, collapse="unit", speaker_key="speaker", tagger="rule")
    out["units"] = {
        k: (sorted(u.rids), u.session, dict(u.terms), sorted(u.entities)) for k, u in nt.units.items()
    }
    out["unit_of"] = dict(nt.unit_of)
    out["entity_units"] = {e: set(v) for e, v in nt.entity_units.items()}
    out["session_tf"], out["session_len"] = nt.session_tf, nt.session_len
    return out


def index_dir(path) -> Path:
    return Path(str(path) + ".index")


def rebuilt(path, monkeypatch) -> dict:
    """What a process with no snapshot files finds (it saves none either)."""
    aside = Path(str(path) + ".aside")
    had = index_dir(path).exists()
    if had:
        index_dir(path).rename(aside)
    with monkeypatch.context() as mp:
        mp.setattr(LexicalIndexes, "SNAPSHOT_MIN", 10**9)
        mp.setattr(TermIndex, "SNAPSHOT_MIN", 10**9)
        with memory(path) as m:
            got = results(m)
    assert not index_dir(path).exists()
    if had:
        aside.rename(index_dir(path))
    return got


def saved(path, n: int = 80) -> None:
    """A store of ``n`` turns of ``alice`` (and 30 of ``bob``), searched and closed: both files written."""
    with memory(path) as m:
        m.add_many(turns(n))
        m.add_many(turns(30, seed=9), namespace="bob")
        results(m)
    assert len(list(index_dir(path).glob("*.snap"))) == 2  # alice's postings and terms (bob is below MIN)


def snap(path, kind: str) -> Path:
    for f in index_dir(path).glob("*.snap"):
        with open(f, "rb") as fh:
            fh.read(len(snapshot.MAGIC))
            n = int.from_bytes(fh.read(8), "little")
            if json.loads(fh.read(n))["meta"]["kind"] == kind:
                return f
    raise AssertionError(f"no {kind} file")


def add(m):
    m.add_many(turns(5, seed=1, start=200))


def update(m):
    item = m.list()[3]
    m.update(
        item.id,
        content="Ann: piano lessons in Oslo 2030",
        metadata={"text": "Ann: piano lessons in Oslo 2030"},
    )


def delete(m):
    for item in m.list()[:4]:
        m.delete(item.id)


def undo(m):
    items = m.list()
    m.update(items[5].id, content="Ben: chess in Kyoto")
    m.delete(items[6].id)
    m.undo(items[5].id)
    m.undo(items[6].id)


def import_onto(m):
    exported = m.export_lines(namespace="bob")
    m.import_lines(exported, namespace="alice", overwrite=True)


def clone_onto(m):
    m.clone("bob", "alice", overwrite=True)


def reset(m):
    m.reset()
    m.add_many(turns(25, seed=3))


#: write -> whether the saved files still describe the namespace (same generation: loaded, brought forward)
WRITES = {
    add: True,
    update: True,
    delete: True,
    undo: True,
    import_onto: False,
    clone_onto: False,
    reset: False,
}


@pytest.mark.parametrize("write", list(WRITES), ids=lambda f: f.__name__)
def test_a_new_process_after_each_kind_of_write_equals_a_rebuild(tmp_path, monkeypatch, analysed, write):
    path = tmp_path / "m.db"
    saved(path)
    with memory(path) as m:  # a process that writes and never searches: the files fall behind
        write(m)
        changed = len(m.aio.store.changes_since("alice", snap_seq(path)))
        live = m.count()
    want = rebuilt(path, monkeypatch)
    for k in analysed:
        analysed[k] = 0
    with memory(path) as m:
        got = results(m)
    assert got == want
    if WRITES[write]:  # loaded: only the rows changed since the file were analysed
        assert 0 < changed < live
        assert analysed["bm25"] <= changed and analysed["tagged"] <= changed
    else:  # another generation: the old files were not used
        assert analysed["bm25"] >= min(live, 20) and analysed["tagged"] >= min(live, 20)


def snap_seq(path) -> int:
    f = snap(path, "lexical")
    with open(f, "rb") as fh:
        fh.read(len(snapshot.MAGIC))
        n = int.from_bytes(fh.read(8), "little")
        return json.loads(fh.read(n))["meta"]["seq"]


def test_the_loaded_index_is_followed_by_its_own_process(tmp_path, monkeypatch):
    """Writes after a load, in the loading process: compaction of loaded postings, terms of loaded units."""
    path = tmp_path / "m.db"
    saved(path, 150)
    with memory(path) as m:
        results(m)
        idx = m.aio.index.lexical.content("alice")
        assert len(idx._base) > 50 and not idx._postings  # loaded: every posting still in the file's arrays
        m.add_many(turns(10, seed=4, start=300))
        results(m)
        assert idx._postings and idx._base  # the written terms left the arrays, the others stay
        for item in m.list(limit=200)[:100]:  # more dead slots than live ones (and > 64): compacted
            m.delete(item.id)
        got = results(m)
        idx = m.aio.index.lexical.content("alice")
        assert not idx._base and len(idx._rids) < 100
    assert got == rebuilt(path, monkeypatch)
    with memory(path) as m:  # and what it saved on close loads again
        assert results(m) == got


def test_a_killed_process_leaves_a_file_that_is_brought_forward(tmp_path, monkeypatch, analysed):
    path = tmp_path / "m.db"
    child = f"""
import os, sys
sys.path.insert(0, {str(ROOT)!r})
from tests.test_snapshots_lexical import memory, turns, results
from memrl.memory.index.lexical import LexicalIndexes
from memrl.memory.search.terms import TermIndex
LexicalIndexes.SNAPSHOT_MIN = TermIndex.SNAPSHOT_MIN = {MIN}
m = memory({str(path)!r})
m.add_many(turns(80))
results(m)  # the cold build saves both files at once
assert len(os.listdir({str(index_dir(path))!r})) == 2
m.add_many(turns(6, seed=5, start=400))  # committed, never saved
m.delete(m.list()[0].id)
os._exit(0)  # no close
"""
    subprocess.run([sys.executable, "-c", child], check=True, cwd=ROOT, timeout=300)
    want = rebuilt(path, monkeypatch)
    for k in analysed:
        analysed[k] = 0
    with memory(path) as m:
        assert results(m) == want
    assert 0 < analysed["bm25"] <= 7 and analysed["tagged"] <= 7


def test_a_new_interpreter_loads_and_equals_a_rebuild(tmp_path, monkeypatch):
    path = tmp_path / "m.db"
    saved(path)
    with memory(path) as m:
        add(m)
        delete(m)
    child = f"""
import json, sys
sys.path.insert(0, {str(ROOT)!r})
from tests.test_snapshots_lexical import memory, results, QUERIES
from memrl.memory.index import lexical
seen = []
real = lexical.term_counts
lexical.term_counts = lambda t: seen.append(t) or real(t)
with memory({str(path)!r}) as m:
    got = results(m)
print(json.dumps({{"hits": {{f"{{q}}|{{mode}}": got[q, mode] for q in QUERIES for mode in ("bm25", "hybrid")}},
                  "tokenized": len(seen)}}))
"""
    out = json.loads(subprocess.run([sys.executable, "-c", child], check=True, cwd=ROOT, timeout=300,
                                    capture_output=True, text=True).stdout)  # fmt: skip
    want = rebuilt(path, monkeypatch)
    for q in QUERIES:
        for mode in ("bm25", "hybrid"):
            assert [tuple(h) for h in out["hits"][f"{q}|{mode}"]] == want[q, mode], (q, mode)
    assert out["tokenized"] <= 5  # the five added turns; the deleted ones need no text
