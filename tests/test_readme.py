"""The README's quickstart runs as written, so it cannot drift: its Python block in a fresh process, its
shell blocks with ``memrl`` being this checkout's CLI, and its REST block against the real server the block
starts (``memrl serve memory ... &``; the test starts that line itself, on a free loopback port instead of
8080, and waits for it). All in an empty temporary folder, one store file (``memrl.db``) for the three.

Every other block of the README is listed in :data:`NOT_RUN` with the reason (installs, GPU training, an
OpenAI key, an hour of CPU), and a block that is neither fails the test: a new block must choose.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: First line of each block not run here -> why.
NOT_RUN = {
    "make demo": "installs .venv and runs the offline model (make test runs the suite)",
    'pip install ".[serve': "installs packages (tests/test_wheel.py builds and installs the wheel)",
    "memrl eval --dataset locomo --conv-id": "minutes of the offline model; docs/evaluation.md",
    "memrl train grpo --task answer": "hours of training on CPU",
    'pip install "memrl[verl]"': "verl on GPU machines",
    "make install": "an hour of training on CPU",
    "memrl/": "not code: the layout",
}


def blocks(text: str) -> list[tuple[str, str, str]]:
    """(section heading, language, code) of every fenced block."""
    out, heading = [], ""
    for m in re.finditer(r"^(## [^\n]*)$|^```(\w*)\n(.*?)^```", text, re.M | re.S):
        if m.group(1):
            heading = m.group(1)[3:].strip()
        else:
            out.append((heading, m.group(2), m.group(3)))
    return out


def test_every_block_is_run_or_says_why_not():
    for heading, _, code in blocks(README.read_text()):
        if heading != "Quickstart":
            first = code.strip().splitlines()[0]
            assert any(first.startswith(k) for k in NOT_RUN), f"README block not run nor listed: {first!r}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def shell(tmp_path):
    """An environment where ``memrl`` is this checkout's CLI (and the embedder stays offline)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "memrl"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m memrl.cli.main "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # fmt: skip
    for var in ("MEMRL_DB", "MEMRL_LLM", "MEMRL_EMBEDDER", "MEMRL_TOKEN"):
        env.pop(var, None)
    work = tmp_path / "work"
    work.mkdir()
    return work, env


def _bash(code: str, cwd: Path, env: dict) -> str:
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0, f"{code}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
    return r.stdout


def test_the_quickstart_runs_as_written(shell):
    pytest.importorskip("sentence_transformers", reason="the quickstart uses the default embedder (minilm)")
    work, env = shell
    quick = [(lang, code) for heading, lang, code in blocks(README.read_text()) if heading == "Quickstart"]
    assert [lang for lang, _ in quick] == ["python", "bash", "bash"]
    (_, py), (_, cli), (_, rest) = quick

    r = subprocess.run(
        [sys.executable, "-c", py], cwd=work, env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr
    assert "Alice moved to Lisbon in May 2023" in r.stdout
    assert (work / "memrl.db").is_file()

    out = _bash(cli, work, env)
    assert "Alice plays the guitar" in out

    serve = next(line for line in rest.splitlines() if line.startswith("memrl serve memory"))
    port = _free_port()
    argv = shlex.split(serve.split("&")[0].replace("--port 8080", f"--port {port}"))
    proc = subprocess.Popen([sys.executable, "-m", "memrl.cli.main", *argv[1:]], cwd=work, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout.readline().startswith("serving "), proc.stderr.read()
        assert "agent=raw" in proc.stdout.readline()  # no --llm: the banner says remember stores the turns
        calls = "\n".join(line for line in rest.splitlines() if line != serve)
        out = _bash(calls.replace("127.0.0.1:8080", f"127.0.0.1:{port}"), work, env)
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert '"content":"Alice works as a nurse"' in out.replace(": ", ":")  # the add, then the search finds
    assert "Alice moved to Lisbon in May 2023" in out  # what Python stored
    assert '"dry_run":true' in out.replace(": ", ":") and '"status":"succeeded"' in out.replace(": ", ":")
