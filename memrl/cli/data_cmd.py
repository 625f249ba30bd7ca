"""``memrl data ...``: download benchmark data, and check what a data file holds.

memrl data download locomo [--data-path DIR] [--force]
memrl data info locomo            # sizes, categories and the data problems found while loading
memrl data prepare --format verl --task read|update|build --dataset locomo --output rows.parquet
memrl data prepare --format verl --task read --dataset ruler-synthetic --ruler-task niah_single_2 --lengths 4k \
    --questions 256 --seed 1 --output ruler-train.parquet   # RULER's synthetic tasks, generated (seeded)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    data = sub.add_parser("data", help="benchmark data: download, inspect").add_subparsers(
        dest="action", metavar="ACTION"
    )
    data.required = True
    p = data.add_parser(
        "download", help="download a data set (needs network) and verify or record its checksum"
    )
    p.add_argument("name", help="locomo, longmemeval, longmemeval-m, perltqa, hotpotqa")
    p.add_argument("--data-path", help="data folder (default: $MEMRL_DATA_DIR, then ~/.cache/memrl/data)")
    p.add_argument("--force", action="store_true", help="download again even if the file is there")
    p.set_defaults(func=_download)
    p = data.add_parser("info", help="load a data set and print its size and the problems found")
    p.add_argument(
        "name", help="locomo, longmemeval, perltqa, hotpotqa, ruler-hotpotqa, ruler-locomo, sample"
    )
    p.add_argument("--data-path", help="data file or folder")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_info)
    p = data.add_parser("prepare", help="write training rows for another trainer (verl parquet)")
    p.add_argument(
        "--format", default="verl", choices=["verl"], help="row format (verl: parquet for main_ppo)"
    )
    p.add_argument("--task", required=True, choices=["read", "update", "build"],
                   help="read: MemAgent, update: MemUpdate, build: MemBuilder (ADRPO)")  # fmt: skip
    p.add_argument("--dataset", default="locomo",
                   help="locomo, sample, longmemeval, perltqa, ruler-hotpotqa, ruler-synthetic (generated)")  # fmt: skip
    p.add_argument("--data-path", help="data file or folder")
    p.add_argument("--conv-id", action="append", help="only these conversations (repeatable)")
    p.add_argument("--split", default="train",
                   help="the split whose items are written (LoCoMo train|test, LongMemEval sft|rl|test), also "
                        "written to extra_info.split; a data set without a published split takes it as a "
                        "label only")  # fmt: skip
    p.add_argument("--lengths", nargs="+", default=[],
                   help="ruler-locomo: document length(s), e.g. 2k (documents built from the split's conversations "
                        "only, gold and distractor sessions alike)")  # fmt: skip
    g = p.add_argument_group("ruler-synthetic (read rows of RULER's generated tasks)")
    g.add_argument("--ruler-task", default="niah_single_1,niah_single_2,niah_single_3",
                   help="tasks with one gold answer: niah_single_1-3, niah_multikey_1-3, qa_2 (comma-separated)")  # fmt: skip
    g.add_argument("--questions", type=int, default=64, help="items per task and length")
    g.add_argument("--seed", type=int, default=0,
                   help="generation seed: give training and validation files different seeds (and never the "
                        "seed of an evaluation)")  # fmt: skip
    g.add_argument("--tokenizer", default="model",
                   help="lengths counted in: model (offline SmolLM2's tokenizer), whitespace, or a tokenizer folder")  # fmt: skip
    g.add_argument("--essays", help="folder of the essay haystack (default: DATA/paulgraham)")
    g.add_argument("--hotpotqa", help="HotpotQA dev file (qa_2)")
    p.add_argument("--types", default="core,episodic,semantic,procedural", help="build: agents to train")
    p.add_argument("--expert", default="annotations", choices=["annotations", "none"],
                   help="build: who writes the memory before each session (annotations: LoCoMo's)")  # fmt: skip
    p.add_argument("--max-rows", type=int, help="keep the first N rows")
    p.add_argument("--output", required=True, help="parquet file to write")
    p.set_defaults(func=_prepare)


def _download(args: argparse.Namespace) -> int:
    from memrl.data import download

    def unverified(path: Path, digest: str) -> None:
        print(f"warning: {path.name} has no published checksum; recorded sha256 {digest} in "
              f"{path.name}.sha256 (later downloads must match it)", file=sys.stderr)  # fmt: skip

    for path in download(args.name, args.data_path, force=args.force, on_unverified=unverified):
        print(path)
    return 0


def _info(args: argparse.Namespace) -> int:
    from memrl.data import load_dataset

    records, report = load_dataset(args.name, args.data_path)
    if args.json:
        json.dump({"records": len(records), "report": str(report)}, sys.stdout, indent=2)
        print()
    else:
        print(f"{len(records)} record(s)")
        print(report)
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from memrl.data import load_dataset
    from memrl.data.splits import DERIVED, SPLITS
    from memrl.errors import DataError
    from memrl.integrations.verl.rows import build_rows, read_rows, update_rows, write_parquet

    if args.dataset == "ruler-synthetic":
        return _prepare_ruler(args)
    if args.dataset in DERIVED:  # built from the split's own conversations: a test session never enters
        table = SPLITS[DERIVED[args.dataset]]
        if args.split not in table:
            raise DataError(f"{args.dataset} has no split {args.split!r}; its splits: {', '.join(table)}")
        records, _ = load_dataset(args.dataset, args.data_path, lengths=args.lengths or None,
                                  num_questions=None, seed=0, sources=table[args.split])  # fmt: skip
        table = None
    else:
        records, _ = load_dataset(args.dataset, args.data_path)
        table = SPLITS.get(args.dataset)
    if table is not None:  # only that split's items: a test item never lands in a training file
        if args.split not in table:
            raise DataError(f"{args.dataset} has no split {args.split!r}; its splits: {', '.join(table)}")
        in_split = set(table[args.split])
        outside = sorted(set(args.conv_id or ()) - in_split)
        if outside:
            raise DataError(f"--conv-id {', '.join(outside)} not in the {args.dataset} {args.split} split")
        records = [r for r in records if getattr(r, "id", None) in in_split]
    if args.conv_id:
        wanted = set(args.conv_id)
        records = [r for r in records if getattr(r, "id", None) in wanted]
        missing = wanted - {r.id for r in records}
        if missing:
            raise DataError(f"--conv-id {', '.join(sorted(missing))} not in {args.dataset}")
    if args.task == "read":
        rows = read_rows(records, split=args.split)
    elif args.task == "update":
        rows = update_rows(records, split=args.split)
    else:
        rows = build_rows(records, split=args.split, types=args.types.split(","), expert=args.expert)
    rows = rows[: args.max_rows] if args.max_rows else rows
    path = write_parquet(rows, args.output)
    print(f"{len(rows)} {args.task} rows -> {path}")
    return 0


def _prepare_ruler(args: argparse.Namespace) -> int:
    """RULER's generated tasks as verl read rows; the generated items are written beside the parquet too
    (``OUTPUT.d/{task}_{length}.jsonl`` with their sha256), so a row can be traced to its seed."""
    from memrl.data.download import resolve_data_dir
    from memrl.data.ruler import parse_lengths
    from memrl.data.ruler.synthetic import generate, load_essays, write_items
    from memrl.errors import ConfigError
    from memrl.eval.ruler.run import token_counter
    from memrl.integrations.verl.rows import ruler_rows, write_parquet

    if args.task != "read":
        raise ConfigError("ruler-synthetic makes MemAgent (read) rows: pass --task read")
    tasks = [t.strip() for t in args.ruler_task.split(",") if t.strip()]
    count_tokens = token_counter(args.tokenizer)
    essays = hotpotqa = None
    items = []
    for task in tasks:
        if task in ("niah_single_2", "niah_single_3", "niah_multikey_1") and essays is None:
            essays = load_essays(args.essays or resolve_data_dir(args.data_path) / "paulgraham")
        if task == "qa_2" and hotpotqa is None:
            from memrl.data.download import find_dataset
            from memrl.data.hotpotqa import load_hotpotqa

            hotpotqa = load_hotpotqa(args.hotpotqa or find_dataset("hotpotqa", args.data_path))[0]
        for length in parse_lengths(args.lengths or ["4k"]):
            got = generate(task, length.tokens or 0, count=args.questions, seed=args.seed, label=length.label,
                           count_tokens=count_tokens, essays=essays, hotpotqa=hotpotqa)  # fmt: skip
            digest = write_items(got, Path(f"{args.output}.d") / f"{task}_{length.label}.jsonl")
            print(f"{task} {length.label}: {len(got)} items, sha256 {digest}", file=sys.stderr)
            items += got
    rows = ruler_rows(items, split=args.split)
    rows = rows[: args.max_rows] if args.max_rows else rows
    path = write_parquet(rows, args.output)
    print(f"{len(rows)} read rows -> {path}")
    return 0
