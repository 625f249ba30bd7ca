"""``python -m bench.learning --task read --ruler-task``: the learning benchmark on RULER's generated needle items
(fit, validation and test generated from their own seeds, read back through the ``ruler-synthetic`` loader),
a smoke run of the whole pipeline (SFT on the expert reader, GRPO, evaluations) on the tiny real model, and
the rules' scores on real generated items (the key lookup reads every needle: RULER's needles are solved by
a regular expression)."""

from __future__ import annotations

import json

import pytest

from bench import learning, learning_ruler
from memrl.data.ruler.synthetic import read_items
from tests.learning_checks import assert_sft_only_control
from tests.tiny_lm import make_tiny_lm


def test_learning_bench_on_ruler_items_smoke_on_the_tiny_model(tmp_path, capsys):
    tiny = make_tiny_lm(tmp_path / "lm")
    out = tmp_path / "run"
    learning.main(["--task", "read", "--ruler-task", "niah_single_1", "--length", "1k", "--model", str(tiny),
                   "--train-items", "4", "--eval-items", "3", "--chunk-tokens", "600", "--memory-tokens", "8",
                   "--answer-tokens", "16", "--reward", "reward", "--steps", "1", "--group-size", "2",
                   "--tasks-per-step", "1", "--sft-steps", "1", "--sft-batch", "2", "--budget-minutes", "5",
                   "--out", str(out), "--quiet"])  # fmt: skip
    result = json.loads((out / "learning.json").read_text())
    assert result["metric"] == "score" and result["n_eval"] == 3 and result["train"]["steps"] == 1
    assert result["protocol"]["eval_split"] == "validation" and result["sft"]["steps"] == 1
    assert set(result["rl_over_sft"]) == {"diff", "ci", "excludes_0"} and "em" in result
    # the rules read the needle: the key lookup is RULER's answer on every item
    assert result["trivial"]["key lookup"] == result["best_trivial"] == 100.0
    fit = read_items(out / "data" / "fit_niah_single_1_1k.jsonl")
    held = read_items(out / "data" / "validation_niah_single_1_1k.jsonl")
    assert len(fit) == 4 and len(held) == 3 and not {i.context for i in fit} & {i.context for i in held}
    assert result["setting"]["seeds"] == {"fit": 1, "validation": 2}
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert {r["system"] for r in rows} == {"before", "after SFT", "after", "first needle", "key lookup"}
    assert {r["id"] for r in rows} == {i.id for i in held}
    trained = {json.loads(x)["task"] for x in (out / "train" / "rollouts.jsonl").read_text().splitlines()}
    assert trained and trained <= {i.id for i in fit}


def test_steps_0_is_the_sft_only_control_scored_once(tmp_path):
    tiny = make_tiny_lm(tmp_path / "lm")
    out = tmp_path / "run"
    learning.main(["--task", "read", "--ruler-task", "niah_single_1", "--length", "1k", "--model", str(tiny),
                   "--train-items", "2", "--eval-items", "2", "--chunk-tokens", "600", "--memory-tokens", "8",
                   "--answer-tokens", "16", "--reward", "reward", "--steps", "0", "--sft-steps", "1",
                   "--sft-batch", "2", "--budget-minutes", "5", "--out", str(out), "--quiet"])  # fmt: skip
    assert_sft_only_control(out)
    with pytest.raises(SystemExit):  # the other tasks have no SFT-only control: refused, not a crash later
        learning.parse(["--task", "update", "--steps", "0"])


def test_the_rules_on_generated_multikey_items(tmp_path):
    """With distractor needles of other keys, the first needle is often another key's; the key lookup never."""
    args = learning.parse(["--task", "read", "--ruler-task", "niah_multikey_2", "--length", "1k", "--out",
                           str(tmp_path)])  # fmt: skip
    items, _, _ = learning_ruler.generated(args, "validation", 6)
    preds = learning_ruler.rules(items)
    assert preds["key lookup"] == [it.answers[0] for it in items]
    assert preds["first needle"] != preds["key lookup"]
