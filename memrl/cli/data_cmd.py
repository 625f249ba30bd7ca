"""``memrl data ...``: download benchmark data, and check what a data file holds.

memrl data download locomo [--data-path DIR] [--force]
memrl data info locomo            # sizes, categories and the data problems found while loading
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
