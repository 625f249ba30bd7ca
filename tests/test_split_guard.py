"""No trainer touches a test item by default: ``memrl train`` takes the training split of LoCoMo (and
LongMemEval), refuses an evaluation-split item unless ``--allow-eval-split`` (and records it), and ``memrl
data prepare --split`` writes only that split's items. Real LoCoMo, the real CLI parser."""

from __future__ import annotations

import json

import pytest

from memrl.cli.main import build_parser, main
from memrl.cli.train_cmd import _conversations, write_run_meta
from memrl.data import load_dataset
from memrl.data.splits import LOCOMO_UPDATE_SPLIT, evaluation_items
from memrl.errors import ConfigError

pytestmark = pytest.mark.data
TEST = set(LOCOMO_UPDATE_SPLIT["test"])


def args_of(*argv: str):
    return build_parser().parse_args(["train", "grpo", "--task", "answer", *argv])


def test_the_default_trains_on_the_training_conversations_only(locomo_path):
    convs = _conversations(args_of("--dataset", "locomo", "--data-path", str(locomo_path)))
    assert {c.id for c in convs} == set(LOCOMO_UPDATE_SPLIT["train"])
    convs = _conversations(
        args_of("--dataset", "locomo", "--data-path", str(locomo_path), "--all-conversations")
    )
    assert not {c.id for c in convs} & TEST  # "all" means all of the training split


def test_an_evaluation_item_is_refused_unless_allowed_and_then_recorded(locomo_path, tmp_path, capsys):
    argv = ["train", "grpo", "--task", "answer", "--dataset", "locomo", "--data-path", str(locomo_path),
            "--conv-id", "conv-26", "--output-dir", str(tmp_path / "run")]  # fmt: skip
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "evaluation split" in err and "conv-26" in err and "--allow-eval-split" in err
    assert not (tmp_path / "run").exists()  # refused before anything was written
    for bad in (["--split", "test"], ["--dataset", "locomo", "--split", "train", "--conv-id", "conv-30"]):
        with pytest.raises(ConfigError):
            _conversations(args_of("--dataset", "locomo", "--data-path", str(locomo_path), *bad))
    allowed = args_of("--dataset", "locomo", "--data-path", str(locomo_path), "--conv-id", "conv-26",
                      "--allow-eval-split")  # fmt: skip
    convs = _conversations(allowed)
    write_run_meta(allowed, convs, str(tmp_path / "allowed"))
    meta = json.loads((tmp_path / "allowed" / "run.json").read_text())
    assert meta["allow_eval_split"] is True and meta["eval_items"] == ["conv-26"]
    assert meta["conversations"] == ["conv-26"] and meta["dataset"] == "locomo"


def test_ruler_documents_built_from_test_conversations_are_evaluation_items(locomo_path):
    from memrl.data.ruler import parse_lengths, ruler_locomo_conversations

    convs = load_dataset("locomo", locomo_path)[0]
    docs = ruler_locomo_conversations(convs, parse_lengths("2k"), num_questions=40)
    held = set(evaluation_items("ruler-locomo", docs))
    assert held and all(d.metadata["question_id"].split(":")[0] in TEST for d in docs if d.id in held)
    assert all(d.metadata["question_id"].split(":")[0] not in TEST for d in docs if d.id not in held)


def test_data_prepare_writes_only_the_named_split(locomo_path, tmp_path, capsys):
    pq = pytest.importorskip("pyarrow.parquet")
    for split, wanted in (("train", set(LOCOMO_UPDATE_SPLIT["train"])), ("test", TEST)):
        out = tmp_path / f"{split}.parquet"
        assert main(["data", "prepare", "--task", "update", "--dataset", "locomo", "--data-path", str(locomo_path),
                     "--split", split, "--output", str(out)]) == 0  # fmt: skip
        rows = pq.read_table(out).to_pylist()
        convs = {json.loads(r["extra_info"]["conversation"])["id"] for r in rows}
        assert rows and convs == wanted and all(r["extra_info"]["split"] == split for r in rows)
    assert main(["data", "prepare", "--task", "update", "--dataset", "locomo", "--data-path", str(locomo_path),
                 "--split", "dev", "--output", str(tmp_path / "x.parquet")]) == 1  # fmt: skip
    assert "has no split 'dev'" in capsys.readouterr().err
