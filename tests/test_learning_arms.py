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
    # with two arms of several seeds, each against the other, seed-averaged per item
    r0 = _run(tmp_path / "r0", "raft", "test", 0, [0, 0, 1, 1])
    r1 = _run(tmp_path / "r1", "raft", "test", 1, [0, 0, 1, 0])
    vs = next(
        x for x in arms.table([base, s0, s1, r0, r1]).splitlines() if x.startswith("| grpo minus raft |")
    )
    assert "| test | +50.0 (" in vs  # (1,.5,1,1) - (0,0,1,.5) = mean +0.5


def test_runs_of_one_arm_with_other_experts_or_times_are_not_averaged_as_seeds(tmp_path):
    """expert-sft on the cut expert, on the compressed one, and for a set time are three settings (the
    second experiment's arms): each its own row and its own seed average, never one arm of three seeds."""
    base = _run(tmp_path / "u", "untrained", "validation", 0, [0, 0, 0, 0])
    cmd = "python -m bench.learning_arms --arm expert-sft --expert "
    runs = [
        _run(tmp_path / "c0", "expert-sft", "validation", 0, [1, 0, 0, 0], command=cmd + "cut"),
        _run(tmp_path / "c1", "expert-sft", "validation", 1, [1, 1, 0, 0], command=cmd + "cut"),
        _run(tmp_path / "k0", "expert-sft", "validation", 0, [1, 1, 1, 1], command=cmd + "compressed"),
        _run(
            tmp_path / "t0", "expert-sft", "validation", 0, [0, 0, 0, 1], command=cmd + "cut --sft-seconds 9"
        ),
    ]
    out = arms.table([base, *runs]).splitlines()
    assert "expert-sft (compressed) (`k0`)" in next(x for x in out if "`k0`" in x)
    assert "expert-sft (cut, for the SFT-then-GRPO run's time) (`t0`)" in next(x for x in out if "`t0`" in x)
    averaged = [x for x in out if x.startswith("| expert-sft") and "| validation | 2 |" in x]
    assert averaged == [next(x for x in out if x.startswith("| expert-sft (cut) | validation | 2 |"))]
    assert "| 37.5 |" in averaged[0] and not any(
        "| validation | 4 |" in x or "| validation | 3 |" in x for x in out
    )


def test_transfer_runs_pair_with_the_untrained_transfer_run_on_the_same_items(tmp_path, capsys):
    def transfer(name, arm, tasks):
        f = tmp_path / name
        f.mkdir()
        res = {"arm": arm, "seed": 0, "transfer": {
            t: {"score": 100 * sum(sc) / len(sc), "n": len(sc), "sha256": sha, "scores": sc}
            for t, (sha, sc) in tasks.items()}}  # fmt: skip
        (f / "arm.json").write_text(json.dumps(res))
        return f

    u = transfer("u", "untrained", {"a@4k": ("x", [1, 0, 0, 0]), "b@1k": ("y", [0, 0, 0, 0])})
    r = transfer("r", "raft", {"a@4k": ("x", [1, 1, 0, 0]), "b@1k": ("other items", [1, 1, 1, 1])})
    own = _run(tmp_path / "g0", "grpo", "test", 0, [1, 0, 1, 1])
    arms.main(["--table", str(u), str(r), str(own)])
    out = capsys.readouterr().out
    a = next(x for x in out.splitlines() if "`r`" in x and "a@4k" in x)
    assert "| 50.0 | 25.0 | +25.0 (" in a
    b = next(x for x in out.splitlines() if "`r`" in x and "b@1k" in x)
    assert b.endswith("| 100.0 | - | - |")  # other items: not paired
    assert "`g0`" in out  # a run with its own predictions still gets the main table


def test_transfer_runs_of_several_seeds_are_averaged_per_item_and_arms_compared(tmp_path, capsys):
    def transfer(name, arm, seed, scores):
        f = tmp_path / name
        f.mkdir()
        t = {"score": 100 * sum(scores) / len(scores), "n": len(scores), "sha256": "x", "scores": scores}
        (f / "arm.json").write_text(json.dumps({"arm": arm, "seed": seed, "transfer": {"a@4k": t}}))
        return f

    u = transfer("u", "untrained", 0, [0, 0, 0, 0])
    runs = [transfer("r0", "raft", 0, [1, 1, 0, 0]), transfer("r1", "raft", 1, [1, 0, 0, 0]),
            transfer("g0", "grpo", 0, [1, 0, 0, 0]), transfer("g1", "grpo", 1, [0, 0, 0, 0])]  # fmt: skip
    arms.main(["--table", str(u), *map(str, runs)])
    out = capsys.readouterr().out
    # raft's seeds average to 1 / 0.5 / 0 / 0 per item: 37.5 over the untrained 0
    assert next(x for x in out.splitlines() if x.startswith("| raft | a@4k | 2 |")).startswith(
        "| raft | a@4k | 2 | 37.5 | +37.5 ("
    )
    # grpo averages 0.5 / 0 / 0 / 0: 12.5; minus raft -25.0, paired on the same items
    assert "| grpo | a@4k | 2 | 12.5 | +12.5 (" in out
    assert "| grpo minus raft | a@4k | -25.0 (" in out


def test_expert_arms_on_multivalue_items_train_save_and_reload_on_the_tiny_model(tmp_path):
    """The second experiment's pipeline end to end on the tiny real model: niah_multivalue with the value-set
    reward, SFT on the budget-cut expert then GRPO; the run's policy (SFT adapter merged, GRPO adapter on
    top) reloaded for test gives the predictions its own validation-time weights would."""
    from tests.tiny_lm import make_tiny_lm

    tiny = str(make_tiny_lm(tmp_path / "lm"))
    common = ["--ruler-task", "niah_multivalue", "--length", "1k", "--model", tiny, "--train-items", "2",
              "--eval-items", "2", "--chunk-tokens", "600", "--memory-tokens", "160", "--answer-tokens", "24",
              "--reward", "values", "--rollouts", "2", "--group-size", "2", "--tasks-per-step", "1",
              "--sft-epochs", "1", "--sft-batch", "2", "--watch-items", "0", "--quiet",
              "--ledger", str(tmp_path / "ledger.jsonl")]  # fmt: skip
    out = tmp_path / "sg"
    arms.main(["--arm", "expert-sft-grpo", *common, "--expert", "cut", "--adapter-dir", str(tmp_path / "ad"),
               "--out", str(out)])  # fmt: skip
    res = json.loads((out / "arm.json").read_text())
    assert res["sft"]["expert"] == "cut" and res["sft"]["examples"] > 0 and res["sft"]["sft_steps"] >= 1
    assert 0 < res["sft"]["expert_values_kept"] <= 1 and res["steps"] == 1 and res["rollouts"] == 2
    sft_rows = [json.loads(x) for x in (out / "train" / "sft_metrics.jsonl").read_text().splitlines()]
    assert sft_rows and "loss" in sft_rows[-1]
    assert (out / "train" / "metrics.jsonl").exists() and (out / "train" / "reward.png").exists()
    assert (tmp_path / "ad" / "sft").is_dir() and not (out / "train" / "checkpoint").exists()
    preds = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(preds) == 2 and all(len(p["gold"]) == 4 and 0 <= p["values"] <= 1 for p in preds)
    again = tmp_path / "again"
    arms.main(["--arm", "expert-sft-grpo", *common, "--expert", "cut", "--from-run", str(out),
               "--out", str(again)])  # fmt: skip
    reloaded = [json.loads(x) for x in (again / "predictions.jsonl").read_text().splitlines()]
    assert [p["prediction"] for p in reloaded] == [p["prediction"] for p in preds]


def test_the_compressed_expert_keeps_the_values_the_cut_one_drops(tmp_path):
    """At a 100-token memory (the tiny tokenizer spends 59 on one needle sentence) the verbatim sentences do not
    fit; the compressed lines do: the cut
    expert keeps fewer of the four values (what its SFT can teach at best), and each expert answers only
    the values its memory holds."""
    from bench import learning_expert
    from bench.learning_ruler import reader_config
    from memrl.llm.local import LocalLLM
    from tests.tiny_lm import make_tiny_lm

    tiny = str(make_tiny_lm(tmp_path / "lm"))
    args = arms.parse(["--arm", "expert-sft", "--ruler-task", "niah_multivalue", "--reward", "values", "--model",
                       tiny, "--chunk-tokens", "600", "--memory-tokens", "100", "--out", str(tmp_path)])  # fmt: skip
    from bench.learning_ruler import generated

    items, convs, _ = generated(args, "fit", 3)
    llm = LocalLLM(tiny).load()
    config = reader_config(args)
    kept = {e: learning_expert.values_kept(learning_expert.expert_trajectories(llm, items, convs, config, e), items)
            for e in learning_expert.EXPERTS}  # fmt: skip
    assert kept["cut"] < kept["compressed"]
    _, _, answer = learning_expert.expert_lines(items[0], "cut")
    a, b = items[0].answers[:2]
    assert answer(f"... is: {b}. and nothing else") == b and answer("") == ""


def test_a_transfer_run_keeps_its_predictions_on_the_tiny_model(tmp_path):
    """``--transfer-only``: each transfer task's test items scored and their predictions kept beside arm.json,
    one line per item, whose scores are the ones arm.json reports."""
    from tests.tiny_lm import make_tiny_lm

    tiny = str(make_tiny_lm(tmp_path / "lm"))
    out = tmp_path / "t"
    arms.main(["--arm", "untrained", "--ruler-task", "niah_single_1", "--length", "1k", "--model", tiny,
               "--eval-items", "1", "--chunk-tokens", "600", "--memory-tokens", "48", "--answer-tokens", "8",
               "--eval-split", "test", "--transfer-only", "--transfer-items", "1", "--quiet",
               "--ledger", str(tmp_path / "ledger.jsonl"), "--out", str(out)])  # fmt: skip
    res = json.loads((out / "arm.json").read_text())
    assert set(res["transfer"]) == {f"{t}@{n}" for t, n in arms.TRANSFER}
    for task, length in arms.TRANSFER:
        rows = [json.loads(x) for x in (out / f"transfer-{task}-{length}.jsonl").read_text().splitlines()]
        assert len(rows) == 1 and rows[0]["gold"] and "prediction" in rows[0]
        assert [r["score"] for r in rows] == res["transfer"][f"{task}@{length}"]["scores"]
