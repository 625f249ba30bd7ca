"""How long a ``memrl`` command takes to start: ``memrl --help``, ``memrl memory --help`` and
``memrl memory list`` on a small store, each run in a fresh process (median of ``--runs``).

    python -m bench.cli_start --runs 5
    python -m bench.cli_start --runs 5 --wheel     # also `memrl --help` from a wheel in a clean venv

``--wheel`` builds a wheel of the tracked files, installs it with ``--no-deps`` into a new virtual
environment (as tests/test_wheel.py does, which checks that it runs) and times its ``memrl`` console script
there: ``wheel: --help``, ``wheel: memory --help`` (what runs without memrl's dependencies).

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


def wheel_venv(tmp: Path) -> Path:
    """A clean venv with this checkout's wheel installed (no dependencies); returns its ``memrl`` script."""
    import shutil
    import venv

    src = tmp / "src"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp / "dist"), str(src)], check=True, capture_output=True)  # fmt: skip
    venv.create(tmp / "venv", with_pip=True)
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    wheel = next((tmp / "dist").glob("memrl-*.whl"))
    subprocess.run([str(tmp / "venv" / "bin" / "python"), "-m", "pip", "install", "--no-deps", "-q", str(wheel)],
                   check=True, capture_output=True, env=clean)  # fmt: skip
    return tmp / "venv" / "bin" / "memrl"


def median_run(argv: list[str], runs: int, env: dict[str, str], cwd: str | None = None) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(argv, env=env, check=True, capture_output=True, cwd=cwd)
        times.append(time.perf_counter() - t)
    return round(statistics.median(times), 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per command (the median is kept)")
    ap.add_argument(
        "--wheel", action="store_true", help="also time `memrl --help` from a wheel in a clean venv"
    )
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "m.db")
        subprocess.run([sys.executable, "-m", "memrl.cli.main", "memory", "add", "Alice lives in Lisbon", "--db", db,
                        "-n", "alice", "--embedder", "hashing"], env=env, check=True, capture_output=True)  # fmt: skip
        for name, argv in COMMANDS.items():
            cmd = [sys.executable, "-m", "memrl.cli.main", *(a.format(db=db) for a in argv)]
            out[name] = median_run(cmd, args.runs, env)
            print(f"{name}: {out[name]} s (median of {args.runs})", file=sys.stderr)
        if args.wheel:
            script = wheel_venv(Path(tmp))
            clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
            for name, argv in (("wheel: --help", ["--help"]), ("wheel: memory --help", ["memory", "--help"])):
                out[name] = median_run([str(script), *argv], args.runs, clean, cwd=tmp)
                print(f"{name}: {out[name]} s (median of {args.runs})", file=sys.stderr)
    print(json.dumps({"bench": "cli_start", "runs": args.runs, "seconds": out}))


if __name__ == "__main__":
    main()
