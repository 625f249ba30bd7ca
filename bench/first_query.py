"""A new process's first search on a small store: what importing memrl and its BM25 analysis costs (issue 59).

Builds a store of ``--n`` items (bench/store_data.py's texts, HashingEmbedder vectors) in a temp dir, then
starts ``--repeats`` fresh interpreters, each of which imports memrl, opens the store and runs one search in
``--mode`` (bm25 by default, the search that tokenizes and so loads the stemmer), timing each step. One of
them runs under ``python -X importtime``: the cumulative import time of the stemmer's packages (``nltk``,
``scipy``, PyStemmer's ``Stemmer``) is read from it. Medians over the repeats; the last line of stdout is
one JSON object.

Run::

    .venv/bin/python -m bench.first_query                  # 2,000 items, 5 processes
    .venv/bin/python -m bench.first_query --n 10000 --mode hybrid
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.store_data import NAMESPACE, make_corpus

CHILD = """
import json, sys, time
t0 = time.perf_counter()
from memrl.memory import Memory
from memrl.memory.embedders.providers import HashingEmbedder
t1 = time.perf_counter()
m = Memory(sys.argv[1], embedder=HashingEmbedder(64))
t2 = time.perf_counter()
hits = m.search(sys.argv[3], user_id=sys.argv[4], mode=sys.argv[2], top_k=10)
t3 = time.perf_counter()
m.search(sys.argv[3] + " again", user_id=sys.argv[4], mode=sys.argv[2], top_k=10)
t4 = time.perf_counter()
m.close()
print(json.dumps({"import_ms": (t1 - t0) * 1e3, "open_ms": (t2 - t1) * 1e3, "first_ms": (t3 - t2) * 1e3,
                  "second_ms": (t4 - t3) * 1e3, "hits": len(hits), "nltk": "nltk" in sys.modules,
                  "scipy": "scipy" in sys.modules}))
"""
WATCHED = ("nltk", "scipy", "scipy.stats", "Stemmer")


def build(path: Path, n: int) -> str:
    """A store of ``n`` items; returns a query made of words of its items."""
    from memrl.memory import Memory
    from memrl.memory.embedders.providers import HashingEmbedder

    corpus = make_corpus(0, n, 20_000)
    m = Memory(str(path), embedder=HashingEmbedder(64))
    for b in range(0, n, 500):
        m.add_many(corpus.texts[b : b + 500], user_id=NAMESPACE)
    m.close()
    return " ".join(corpus.texts[n // 2].split()[:4])


def import_times(stderr: str) -> dict[str, float]:
    """Cumulative import ms of each watched top-level package (0 when not imported), from -X importtime."""
    out = dict.fromkeys(WATCHED, 0.0)
    for line in stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)$", line)
        if m and m.group(3) in out and len(m.group(2)) >= 1:
            out[m.group(3)] = max(out[m.group(3)], int(m.group(1)) / 1e3)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=2000, help="items in the store")
    p.add_argument("--mode", default="bm25", choices=("bm25", "hybrid", "dense"))
    p.add_argument("--repeats", type=int, default=5, help="fresh processes timed (medians reported)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "m.db"
        t0 = time.perf_counter()
        query = build(db, args.n)
        build_s = time.perf_counter() - t0
        cmd = [sys.executable, "-c", CHILD, str(db), args.mode, query, NAMESPACE]
        runs = []
        for _ in range(args.repeats):
            runs.append(json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout))
        timed = subprocess.run([sys.executable, "-X", "importtime", *cmd[1:]], capture_output=True, text=True)
    row = {k: round(statistics.median(r[k] for r in runs), 1) for k in runs[0] if k.endswith("_ms")}
    row.update(
        n=args.n, mode=args.mode, repeats=args.repeats, hits=runs[0]["hits"], build_s=round(build_s, 1),
        nltk_imported=runs[0]["nltk"], scipy_imported=runs[0]["scipy"],
        import_ms_by_package=import_times(timed.stderr),
    )  # fmt: skip
    print(f"first {args.mode} search in a new process at n={args.n}: {row['first_ms']} ms "
          f"(import {row['import_ms']} ms, open {row['open_ms']} ms, second search {row['second_ms']} ms)")  # fmt: skip
    print(json.dumps(row))


if __name__ == "__main__":
    main()
