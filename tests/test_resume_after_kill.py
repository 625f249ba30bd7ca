"""A real evaluation killed with SIGKILL in the middle of answering, then resumed with default settings
(concurrency 4), gives exactly the result of an uninterrupted run.

Real parts: the CLI in a subprocess, the local transformers back-end (the tiny model of tests/tiny_lm.py,
so it stays fast), the real all-MiniLM-L6-v2 embedder, SQLite. Resuming skips the build, so the first
searches (several at once) and the model all load together: before the process-wide load lock
(memrl.loading) this crashed with "Cannot copy out of meta tensor" or a half-done import. Also: two
threads that load at once are serialised by that lock (checked directly below).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from memrl.loading import model_load_lock
from tests.tiny_lm import make_tiny_lm

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return str(make_tiny_lm(tmp_path_factory.mktemp("tiny") / "lm"))


def _argv(tiny: str, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "memrl.cli.main", "eval", "--dataset", "sample", "--builder", "raw",
            "--provider", "local", "--model", tiny, "--max-answer-tokens", "48", "--output-dir", str(out),
            "--json", *extra]  # fmt: skip


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "MEMRL_CACHE_DIR": str(tmp / "cache"), "PYTHONPATH": str(ROOT)}  # fmt: skip


def _predictions(out: Path) -> dict[str, str]:
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines() if line.strip()]
    return {r["question_id"]: r["prediction"] for r in rows}


def _answered(out: Path) -> int:
    path = out / "predictions.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_sigkill_mid_answer_then_resume_equals_an_uninterrupted_run(tiny, tmp_path):
    whole = subprocess.run(_argv(tiny, tmp_path / "whole"), env=_env(tmp_path), capture_output=True, text=True,
                           timeout=300)  # fmt: skip
    assert whole.returncode == 0, whole.stderr[-2000:]
    expected = json.loads(whole.stdout.strip().splitlines()[-1])
    assert expected["n_answered"] == 10

    out = tmp_path / "killed"
    proc = subprocess.Popen(_argv(tiny, out), env=_env(tmp_path), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 240
    while _answered(out) == 0 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    done_before = _answered(out)
    assert proc.returncode == -signal.SIGKILL
    assert 0 < done_before < 10, f"the kill should land mid-answer ({done_before} of 10 answered)"

    resumed = subprocess.run(_argv(tiny, out, "--resume"), env=_env(tmp_path), capture_output=True, text=True,
                             timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "Traceback" not in resumed.stderr
    summary = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert summary["n_answered"] == 10 and summary["n_answer_failures"] == 0
    assert _predictions(out) == _predictions(tmp_path / "whole")
    for key in ("f1", "em", "bleu1", "evidence_recall", "f1_by_category"):
        assert summary[key] == expected[key], key


def test_loaders_take_the_process_wide_lock(tiny):
    """While another thread holds the load lock, neither the model loader nor the embedder loads."""
    from memrl.llm.local.hf_models import load_model
    from memrl.memory.embedders.minilm import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder()
    finished: list[str] = []
    threads = [
        threading.Thread(target=lambda: (load_model(tiny), finished.append("model"))),
        threading.Thread(target=lambda: (embedder._load(), finished.append("embedder"))),
    ]
    with model_load_lock():
        for t in threads:
            t.start()
        time.sleep(0.5)
        assert finished == []  # both wait for the lock
    for t in threads:
        t.join(timeout=120)
    assert sorted(finished) == ["embedder", "model"]
