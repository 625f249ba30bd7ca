"""The prepared GPU run of the outcome-only arms (bench/gpu_arms.py), on this CPU: the model carried in
parts that fit a call and are checked when joined, and the run itself (every arm and seed at once, each
result appended as it ends, the rest stopped at the limit) on the tiny real model with a tiny budget."""

from __future__ import annotations

import json

import pytest

from bench import gpu_arms


def test_the_model_travels_in_parts_that_fit_a_call_and_is_checked_when_joined(tmp_path, monkeypatch):
    model = tmp_path / "m.gguf"
    model.write_bytes(bytes(range(256)) * (5 * 4096))  # 5 MiB
    monkeypatch.setattr(gpu_arms, "tree_mib", lambda root=None: 60.5)  # leaves 1.5 MiB a call
    dest = tmp_path / "gpu"
    plan = gpu_arms.pack(gpu_arms.parse(["pack", "--dest", str(dest), "--model-file", str(model),
                                         "--part-mib", "1", "--no-wheels"]))  # fmt: skip
    assert plan["room_mib_per_call"] == 1.5 and len(plan["calls"]) == 5
    assert all(
        len(c["files"]) == 1 and c["carry"] == [f"{dest}/call-{i}"] for i, c in enumerate(plan["calls"], 1)
    )
    assert plan["calls"][-1]["command"].startswith("python3 -m bench.gpu_arms run --device cuda")
    for call in dest.glob("call-*"):
        assert sum(f.stat().st_size for f in call.iterdir()) <= 1.5 * 2**20
    joined, site = gpu_arms.unpack(dest, tmp_path / "work")
    assert joined.read_bytes() == model.read_bytes() and site is None
    part = next((dest / "call-2").glob("*.part*"))
    part.write_bytes(b"x" + part.read_bytes()[1:])
    with pytest.raises(SystemExit, match="call-2.*damaged.*carry call 2 again"):
        gpu_arms.unpack(dest, tmp_path / "work2")
    part.unlink()
    with pytest.raises(SystemExit, match="missing: call 2 of the plan"):
        gpu_arms.unpack(dest, tmp_path / "work3")


def test_the_run_starts_every_arm_and_seed_and_appends_each_result(tmp_path):
    from tests.tiny_lm import make_tiny_lm

    tiny = str(make_tiny_lm(tmp_path / "lm"))
    out = tmp_path / "out"
    gpu_arms.main(["run", "--out", str(out), "--model", tiny, "--device", "cpu", "--batch", "4", "--minutes", "8",
                   "--arms", "grpo", "--seeds", "0", "--setting", "--train-items", "2", "--eval-items", "2",
                   "--rollouts", "2", "--group-size", "2", "--tasks-per-step", "1", "--chunk-tokens", "600",
                   "--memory-tokens", "8", "--answer-tokens", "16"])  # fmt: skip
    rows = [json.loads(x) for x in (out / "arms.jsonl").read_text().splitlines()]
    runs = {r["run"]: r for r in rows}
    assert set(runs) == {"untrained-validation", "untrained-test", "grpo-s0-val", "grpo-s0-test"}
    assert runs["grpo-s0-val"]["rollouts"] == 2 and runs["grpo-s0-test"]["eval_split"] == "test"
    assert runs["grpo-s0-test"]["trained"]["from_run"].endswith("grpo-s0-val")
    assert all(len(r["predictions"]) == 2 for r in rows)
    # the test evaluation of each setting is recorded once in the run's ledger
    ledger = [json.loads(x) for x in (out / "runs" / "ledger.jsonl").read_text().splitlines()]
    assert len(ledger) == 2
    summary = (out / "summary.md").read_text()
    assert "grpo (`grpo-s0-test`)" in summary and "grpo (`grpo-s0-val`)" in summary
    assert "== grpo-s0.log" in (out / "log.txt").read_text()
