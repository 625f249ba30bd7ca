"""Helpers for the tests that load a real ``memrl serve memory`` process: start one (this checkout's code,
``python -m memrl.cli.main``), and probe it from a process of its own while a noisy client works, recording
how long ``/health`` and a quiet tenant's requests take."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def memory_process(db: str | Path, *flags: str, llm: str = "none") -> Iterator[tuple[str, subprocess.Popen]]:
    """``memrl serve memory`` on a free loopback port (hashing embedder, no browser), until the block ends."""
    port = free_port()
    argv = [sys.executable, "-m", "memrl.cli.main", "serve", "memory", "--db", str(db), "--port", str(port),
            "--embedder", "hashing:64", "--no-ui", "--no-access-log", "--llm", llm, *flags]  # fmt: skip
    # no JSON line per request: the output is a pipe nobody reads while the test runs, and would fill
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited: {proc.stdout.read() if proc.stdout else ''}")
            with contextlib.suppress(httpx.HTTPError), httpx.Client(base_url=url, timeout=2) as c:
                if c.get("/health").status_code == 200:
                    break
            time.sleep(0.1)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


#: The probe's own process: threads asking each path until its stdin closes, then every (seconds, status)
#: as JSON on stdout. Apart from the test's process, so the noisy clients' work does not slow the probe.
_PROBE = """import json, sys, threading, time
import httpx
url, every, paths = sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3])
seen, stop = {}, threading.Event()
def run(name, path, token):
    headers = {"Authorization": "Bearer " + token} if token else {}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as c:
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                status = c.get(path).status_code
            except httpx.HTTPError:
                status = 0
            seen.setdefault(name, []).append((time.perf_counter() - t0, status))
            stop.wait(every)
threads = [threading.Thread(target=run, args=p) for p in paths]
for t in threads:
    t.start()
print("started", flush=True)
sys.stdin.read()
stop.set()
for t in threads:
    t.join()
print(json.dumps(seen), flush=True)
"""


@dataclass
class Probe:
    """A process asking ``paths`` (``(name, path, token)``) every ``every`` seconds while the block runs;
    the latency and status of every answer per name."""

    url: str
    paths: list[tuple[str, str, str | None]]
    every: float = 0.1
    seen: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    _proc: subprocess.Popen | None = None

    def __enter__(self) -> Probe:
        argv = [sys.executable, "-c", _PROBE, self.url, str(self.every), json.dumps(self.paths)]
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None and self._proc.stdout.readline().strip() == "started"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None
        out, _ = self._proc.communicate("", timeout=120)
        self.seen = json.loads(out.strip().splitlines()[-1])

    def worst(self, name: str) -> float:
        return max(s for s, _ in self.seen.get(name, [(float("inf"), 0)]))

    def statuses(self, name: str) -> set[int]:
        return {code for _, code in self.seen.get(name, [])}
