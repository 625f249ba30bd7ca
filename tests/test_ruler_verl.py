"""RULER's generated tasks as verl ``read`` rows, up to verl's boundary (no GPU run): the rows ``memrl data
prepare`` writes carry each item's question, context and gold answer as the memagent loop reads them, the
generated items are kept with their checksums, tasks with several gold values are refused, and the shipped
config composes on verl's trainer config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memrl.cli.main import main
from memrl.data.ruler.synthetic import read_items
from memrl.integrations.verl.rows import RowTask

ROOT = Path(__file__).resolve().parents[1]


def prepare(tmp_path, *extra):
    out = tmp_path / "ruler.parquet"
    code = main(["data", "prepare", "--format", "verl", "--task", "read", "--dataset", "ruler-synthetic",
                 "--tokenizer", "whitespace", "--lengths", "1k", "--questions", "3", "--output", str(out), *extra])  # fmt: skip
    return code, out


def test_rows_hold_each_generated_item(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    code, out = prepare(tmp_path, "--ruler-task", "niah_single_1,niah_multikey_2", "--seed", "5")
    assert code == 0
    rows = pq.read_table(out).to_pylist()
    items = [*read_items(f"{out}.d/niah_single_1_1k.jsonl"), *read_items(f"{out}.d/niah_multikey_2_1k.jsonl")]
    assert len(rows) == len(items) == 6
    for row, item in zip(rows, items, strict=True):
        task = RowTask.from_kwargs(row)  # what the memagent loop reads
        assert task.task == "read" and row["agent_name"] == "memagent"
        assert task.golds == list(item.answers) and len(task.golds) == 1
        assert task.info["document"] == item.context and f"is: {item.answers[0]}." in item.context
        assert row["prompt"][0]["content"] == task.question == item.question
        assert task.info["question_id"] == item.id and task.info["split"] == "train"
    # the same seed gives the same rows; another seed other items
    code, again = prepare(tmp_path / "b", "--ruler-task", "niah_single_1,niah_multikey_2", "--seed", "5")
    assert pq.read_table(again).to_pylist() == rows
    code, other = prepare(tmp_path / "c", "--ruler-task", "niah_single_1", "--seed", "6")
    gold = lambda row: json.loads(row["reward_model"]["ground_truth"])  # noqa: E731
    assert gold(pq.read_table(other).to_pylist()[0]) != gold(rows[0])


def test_tasks_with_several_gold_values_are_refused(tmp_path, capsys):
    code, out = prepare(tmp_path, "--ruler-task", "vt")
    assert code == 1 and not out.exists()
    assert "boxed match" in capsys.readouterr().err


def test_the_ruler_config_composes_on_verls_trainer():
    pytest.importorskip("verl")
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(version_base=None, config_dir=str(ROOT / "configs/verl")):
        cfg = compose(config_name="memagent_ruler", overrides=["data.train_files=x.parquet"])
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "memagent"
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.actor_rollout_ref.rollout.n == 16
    loops = OmegaConf.load(ROOT / cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path)
    assert [entry.name for entry in loops] == ["memagent"]
