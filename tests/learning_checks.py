"""Checks shared by the learning benchmark's tests (``bench/learning.py``'s outputs)."""

from __future__ import annotations

import json
from pathlib import Path


def assert_sft_only_control(out: Path, sft_steps: int = 1) -> set[str]:
    """A ``--steps 0`` run in ``out``: ``sft_steps`` SFT steps, no GRPO rollout, and the SFT model's predictions reported
    as the final model's (scored once); returns the held-out item ids."""
    result = json.loads((out / "learning.json").read_text())
    assert result["train"] == {"steps": 0} and result["sft"]["steps"] == sft_steps
    assert not (out / "train" / "rollouts.jsonl").exists()  # no GRPO rollout
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    by = {(r["system"], r["id"]): r["prediction"] for r in rows}
    held = {r["id"] for r in rows}
    assert all(by[("after", i)] == by[("after SFT", i)] for i in held)  # the SFT model is the final model
    assert result["rl_over_sft"]["diff"] == 0.0
    return held
