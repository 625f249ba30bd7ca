"""How long a ``memrl`` command takes to start: ``memrl --help``, ``memrl memory --help`` and
``memrl memory list`` on a small store, each run in a fresh process (median of ``--runs``).

    python -m bench.cli_start --runs 5

The CLI imports only the module of the command it runs (memrl/cli/main.py ``COMMANDS``); before that, every
call imported all of them (torch included: 3.5-5 s). Prints one JSON line last: seconds per command.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "--help": ["--help"],
    "memory --help": ["memory", "--help"],
    "memory list --help": ["memory", "list", "--help"],
    "memory list": ["memory", "list", "--db", "{db}", "-n", "alice"],
    "eval --help": ["eval", "--help"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per command (the median is kept)")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "m.db")
        subprocess.run([sys.executable, "-m", "memrl.cli.main", "memory", "add", "Alice lives in Lisbon", "--db", db,
                        "-n", "alice", "--embedder", "hashing"], env=env, check=True, capture_output=True)  # fmt: skip
        for name, argv in COMMANDS.items():
            times = []
            for _ in range(args.runs):
                t = time.perf_counter()
                subprocess.run([sys.executable, "-m", "memrl.cli.main", *(a.format(db=db) for a in argv)], env=env,
                               check=True, capture_output=True)  # fmt: skip
                times.append(time.perf_counter() - t)
            out[name] = round(statistics.median(times), 3)
            print(f"{name}: {out[name]} s (median of {args.runs})", file=sys.stderr)
    print(json.dumps({"bench": "cli_start", "runs": args.runs, "seconds": out}))


if __name__ == "__main__":
    main()
