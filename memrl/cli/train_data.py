"""What ``memrl train`` commands train on: the conversations behind the split guard, and the record of them
(``OUTPUT_DIR/run.json``). Shared by :mod:`memrl.cli.train_cmd` and :mod:`memrl.cli.sft_cmd`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_split_guard(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allow-eval-split", action="store_true",
        help="train on items of an evaluation split (LoCoMo test, LongMemEval test) too: refused without it; "
             "recorded in OUTPUT_DIR/run.json",
    )  # fmt: skip


def _conversations(args: argparse.Namespace) -> list:
    """The conversations to train on, selected by the same code as ``memrl eval``, behind the split guard.

    A data set with a published split (LoCoMo, LongMemEval) gives its training split unless ``--split`` or
    ``--conv-id`` says otherwise (another dialogue data set its first conversation, a documents data set every
    document, unless ``--all-conversations`` or ``--conv-id``), and an item of an evaluation split is refused unless
    ``--allow-eval-split``: the default never trains on a test item.
    """
    from memrl.data.splits import SPLITS, TRAIN_SPLITS, evaluation_items
    from memrl.errors import ConfigError
    from memrl.eval.qa.config import QAEvalConfig, load_conversations

    split = getattr(args, "split", None)
    if split is None and not args.conv_id and args.dataset in TRAIN_SPLITS and not args.allow_eval_split:
        split = TRAIN_SPLITS[args.dataset]
    conv_ids: tuple[str, ...] = (
        () if args.all_conversations or split else (args.conv_id,) if args.conv_id else ()
    )
    if args.conv_id and split:
        conv_ids = (args.conv_id,)
    from memrl.data import DOCUMENT_DATASETS

    # a dialogue data set trains on its first conversation unless told more; a documents data set (one
    # question per document: HotpotQA, the RULER sets) on every document
    if not conv_ids and not args.all_conversations and not split and args.dataset not in DOCUMENT_DATASETS:
        from memrl.cli.common import load_conversation

        conv_ids = (load_conversation(args).id,)
    if split and args.conv_id and args.dataset in SPLITS and args.conv_id not in SPLITS[args.dataset][split]:
        raise ConfigError(f"--conv-id {args.conv_id} is not in the {args.dataset} {split} split")
    cfg = QAEvalConfig(dataset=args.dataset, data_path=args.data_path, conv_id=conv_ids, split=split,
                       questions=getattr(args, "questions", None), lengths=tuple(getattr(args, "lengths", ())))  # fmt: skip
    convs = load_conversations(cfg)
    held = evaluation_items(args.dataset, convs)
    if held and not args.allow_eval_split:
        raise ConfigError(
            f"{len(held)} of the selected items belong to an evaluation split of {args.dataset} "
            f"({', '.join(held[:5])}{', ...' if len(held) > 5 else ''}): training on them would leak the test "
            f"set. Use --split {TRAIN_SPLITS.get(args.dataset, 'train')} (the default), or pass "
            "--allow-eval-split on purpose (it is recorded in the run's run.json)"
        )
    args.eval_items = held
    args.resolved_split = split
    return convs


def write_run_meta(args: argparse.Namespace, convs: list, output_dir: str | None = None) -> None:
    """``OUTPUT_DIR/run.json``: what the run trained on (data set, split, conversations), whether it was
    allowed to touch evaluation items, which ones, and what it scored as held out (``--eval-split``)."""
    out = Path(output_dir or args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "command": getattr(args, "task_cmd", None), "task": getattr(args, "task", None),
        "dataset": args.dataset, "split": getattr(args, "resolved_split", None),
        "conversations": [c.id for c in convs], "allow_eval_split": bool(args.allow_eval_split),
        "eval_items": list(getattr(args, "eval_items", [])),
        "heldout_split": getattr(args, "eval_split", None),
        "heldout_conversations": list(getattr(args, "heldout_conversations", [])),
    }  # fmt: skip
    (out / "run.json").write_text(json.dumps(meta, indent=1) + "\n")
