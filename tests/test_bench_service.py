"""bench/service.py's remember phase, run small as a real subprocess: its last line is the JSON report, with
jobs per minute and p50/p99 job latency from the instant scripted model, every job succeeded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_remember_phase_reports_jobs_per_minute_and_latency():
    argv = [sys.executable, "-m", "bench.service", "--clients", "3", "--requests", "20", "--only-remember"]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, check=True)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    phase = out["remember"]
    assert phase["jobs"] == 3 * 2 and phase["failed"] == 0 and phase["statuses"] == {"200": 6}
    assert phase["jobs_per_min"] > 0 and 0 < phase["job_p50_ms"] <= phase["job_p99_ms"]
    assert phase["events_per_job"] == 3.0 and phase["model"] == "scripted:scripted"
    assert "remember_offline" not in out
