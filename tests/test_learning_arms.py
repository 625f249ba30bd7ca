"""The learning-without-an-expert bench (bench/learning_arms.py): its budget check, what counts as a setting
for the ledger, and the table it prints from kept runs (no model: runs written by hand)."""

from __future__ import annotations

import json

import pytest

from bench import learning_arms as arms


def test_the_budget_is_a_whole_number_of_steps_and_bookkeeping_is_not_a_setting(tmp_path):
    with pytest.raises(SystemExit):
        arms.parse(
            ["--arm", "grpo", "--out", str(tmp_path), "--rollouts", "20"]
        )  # 20 is not a multiple of 16
    with pytest.raises(SystemExit):
        arms.parse(["--arm", "grpo"])  # no --out
    a = arms.parse(["--arm", "raft", "--out", str(tmp_path / "a"), "--watch-items", "4"])
    b = arms.parse(["--arm", "raft", "--out", str(tmp_path / "b"), "--watch-items", "0", "--from-run", "x"])
    from memrl.eval.protocol import setting_key

    assert (
        setting_key(arms._setting(a))[0] == setting_key(arms._setting(b))[0]
    )  # watching, loading: bookkeeping
    c = arms.parse(["--arm", "raft", "--out", str(tmp_path / "c"), "--rollouts", "32"])
    assert setting_key(arms._setting(c))[0] != setting_key(arms._setting(a))[0]  # the budget is a setting
    t = arms.parse(
        ["--arm", "raft", "--out", str(tmp_path / "t"), "--transfer-only", "--transfer-items", "4"]
    )
    assert setting_key(arms._setting(t))[0] != setting_key(arms._setting(a))[0]  # transfer: its own count
    u1 = arms.parse(["--arm", "untrained", "--out", str(tmp_path / "u1")])
    u2 = arms.parse(["--arm", "untrained", "--out", str(tmp_path / "u2"), "--lr", "1e-3"])
    assert setting_key(arms._setting(u1))[0] == setting_key(arms._setting(u2))[0]  # training args: not its


def _run(folder, arm, split, seed, scores, **extra):
    folder.mkdir(parents=True)
    res = {"arm": arm, "eval_split": split, "seed": seed, "needle_in_memory": 50.0, "rollouts": 48, "steps": 3,
           "wall_s": 100.0, "cpu_s": 90.0, "rules": {"key lookup": 100.0}, **extra}  # fmt: skip
    (folder / "arm.json").write_text(json.dumps(res))
    rows = [{"id": f"i{k}", "score": s, "rules": {"key lookup": 1.0}} for k, s in enumerate(scores)]
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_the_table_pairs_each_run_with_the_untrained_one_and_averages_seeds(tmp_path):
    base = _run(tmp_path / "u", "untrained", "test", 0, [0, 0, 1, 1, 0, 0])  # more items: paired by id
    s0 = _run(tmp_path / "g0", "grpo", "test", 0, [1, 0, 1, 1],
              trained={"from_run": "v", "wall_s": 555.0, "cpu_s": 444.0})  # fmt: skip
    s1 = _run(tmp_path / "g1", "grpo", "test", 1, [1, 1, 1, 1])
    out = arms.table([base, s0, s1])
    row0 = next(x for x in out.splitlines() if "`g0`" in x)
    assert (
        "| 4 |" in row0 and "| 50.0 | +25.0" in row0 and "| 555 | 444 |" in row0
    )  # a loaded policy shows its training run's cost
    assert "+50.0" in next(x for x in out.splitlines() if "`g1`" in x)
    avg = next(x for x in out.splitlines() if x.startswith("| grpo | test | 2 |"))
    assert "| 87.5 |" in avg and "+37.5" in avg  # seed-averaged per item: (1,.5,1,1) - (0,0,1,1)
    assert "key lookup 100.0" in out
