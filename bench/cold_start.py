"""A new process's first BM25 and hybrid search of a big SQLite namespace, with and without the snapshot
files of its BM25 postings and terms (issue 59: cold start from files, not rebuilds).

Builds a store of ``--n`` items (bench/store_data.py's texts, in sessions of 20 as bench/peers.py stores
them, HashingEmbedder vectors) in a temp dir, lets one process search and close (which writes
``<db>.index/``), then times fresh interpreters' first search in each ``--modes``:

- ``loaded``: with the files (the process loads them);
- ``rebuilt``: ``<db>.index`` deleted first (the process rebuilds, then writes the files again, as a first
  process does);
- ``rebuilt_nosave``: deleted, and nothing saved (``SNAPSHOT_MIN`` out of reach): the cost before issue 59.

Each child also reports the time spent in ``LexicalIndexes.content`` and ``TermIndex.get`` during that
first search. Medians over ``--repeats``; the last line of stdout is one JSON object.

Run::

    nice -n 10 .venv/bin/python -m bench.cold_start --n 30000
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.store_data import NAMESPACE, TYPES, make_corpus

CHILD = """
import json, sys, time
t0 = time.perf_counter()
from memrl.memory import Memory
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.index.lexical import LexicalIndexes
from memrl.memory.search.terms import TermIndex
t1 = time.perf_counter()
if sys.argv[5] == "nosave":
    LexicalIndexes.SNAPSHOT_MIN = TermIndex.SNAPSHOT_MIN = 10**12
spent = {"lexical": 0.0, "terms": 0.0}
def timed(name, f):
    def run(*a, **k):
        s = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            spent[name] += time.perf_counter() - s
    return run
LexicalIndexes.content = timed("lexical", LexicalIndexes.content)
TermIndex.get = timed("terms", TermIndex.get)
m = Memory(sys.argv[1], embedder=HashingEmbedder(64))
t2 = time.perf_counter()
hits = m.search(sys.argv[3], user_id=sys.argv[4], mode=sys.argv[2], top_k=10)
t3 = time.perf_counter()
first = dict(spent)
m.search(sys.argv[3] + " again", user_id=sys.argv[4], mode=sys.argv[2], top_k=10)
t4 = time.perf_counter()
m.close()
print(json.dumps({"import_ms": (t1 - t0) * 1e3, "open_ms": (t2 - t1) * 1e3, "first_ms": (t3 - t2) * 1e3,
                  "lexical_ms": first["lexical"] * 1e3, "terms_ms": first["terms"] * 1e3,
                  "second_ms": (t4 - t3) * 1e3, "hits": [h.item.id for h in hits],
                  "scores": [h.score for h in hits]}))
"""


def build(path: Path, n: int) -> str:
    """A store of ``n`` items; returns a query made of words of one of them."""
    from memrl.memory import Memory
    from memrl.memory.embedders.providers import HashingEmbedder
    from memrl.memory.store.base import NewItem

    corpus = make_corpus(0, n, 20_000)
    m = Memory(str(path), embedder=HashingEmbedder(64))
    for b in range(0, n, 500):
        items = [NewItem(corpus.texts[i], type=TYPES[i % 3], session=f"s{i // 20}", id=f"m{i}")
                 for i in range(b, min(n, b + 500))]  # fmt: skip
        m.add_many(items, user_id=NAMESPACE)
    m.close()
    return " ".join(corpus.texts[n // 2].split()[:4])


def run_child(db: Path, mode: str, query: str, save: str) -> dict:
    """One fresh interpreter's first search (``save``: "save", or "nosave" for the cost before issue 59)."""
    cmd = [sys.executable, "-c", CHILD, str(db), mode, query, NAMESPACE, save]
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=30_000, help="items in the store")
    p.add_argument("--modes", default="bm25,hybrid", help="search modes timed, comma-separated")
    p.add_argument("--repeats", type=int, default=3, help="fresh processes per case (medians reported)")
    args = p.parse_args(argv)
    row: dict = {"n": args.n, "repeats": args.repeats}
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "m.db"
        index = Path(str(db) + ".index")
        t0 = time.perf_counter()
        query = build(db, args.n)
        row["build_s"] = round(time.perf_counter() - t0, 1)
        for mode in args.modes.split(","):
            child = functools.partial(run_child, db, mode, query)
            shutil.rmtree(index, ignore_errors=True)
            child("save")  # writes the files (after its cold build, and on close)
            row["index_bytes"] = sum(f.stat().st_size for f in index.glob("*.snap"))
            runs: dict[str, list[dict]] = {"loaded": [], "rebuilt": [], "rebuilt_nosave": []}
            for _ in range(args.repeats):
                runs["loaded"].append(child("save"))
                for case, save in (("rebuilt", "save"), ("rebuilt_nosave", "nosave")):
                    shutil.rmtree(index, ignore_errors=True)
                    runs[case].append(child(save))
                child("save")  # the files again, for the next loaded run
            out = {}
            for case, rs in runs.items():
                out[case] = {
                    k: round(statistics.median(r[k] for r in rs), 1) for k in rs[0] if k.endswith("_ms")
                }
            same = all(r["hits"] == runs["rebuilt"][0]["hits"] and r["scores"] == runs["rebuilt"][0]["scores"]
                       for rs in runs.values() for r in rs)  # fmt: skip
            out["same_results"] = same
            out["speedup_first"] = round(out["rebuilt_nosave"]["first_ms"] / out["loaded"]["first_ms"], 2)
            row[mode] = out
            print(f"{mode}: first search {out['loaded']['first_ms']} ms with the files, "
                  f"{out['rebuilt']['first_ms']} ms rebuilding (and saving), "
                  f"{out['rebuilt_nosave']['first_ms']} ms rebuilding as before; same results: {same}")  # fmt: skip
    print(json.dumps(row))


if __name__ == "__main__":
    main()
