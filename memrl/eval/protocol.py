"""The learning protocol: which items train, which choose, which test, and how often test was read.

Every learning claim of the learning benchmark (``python -m bench.learning``) follows it (docs/training.md,
"The learning protocol"):

* items are fixed before any run: LoCoMo's ``fit`` conversations train, its ``validation`` conversations
  choose every setting, its ``test`` conversations report (:data:`memrl.data.splits.LOCOMO_PROTOCOL_SPLIT`;
  RULER-LoCoMo documents take the same parts, gold and distractor sessions alike);
* ``--eval-split validation`` is the default: runs that compare settings read validation items only;
* ``--eval-split test`` is for a final setting: each such run is appended to a ledger
  (``--ledger``, default ``runs/protocol/test-evaluations.jsonl``) and the result says how many test
  evaluations that setting and all settings have had, so a reader can tell a setting chosen on test;
* intervals are cluster bootstraps over conversations (:func:`cluster_of`): the questions of one
  conversation share its memory and its documents' distractors, so they are not independent items.

A setting is everything that changes what is trained or how it is evaluated: the arguments other than the
seed, the output folder, the ledger and other bookkeeping (:func:`setting_key`).

    from memrl.eval.protocol import cluster_of, protocol
    result["protocol"] = protocol(args, record=True)     # args: the benchmark's argparse namespace
    clusters = [cluster_of(item) for item in items]      # one label per item, for cluster_bootstrap_ci
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

__all__ = [
    "BOOKKEEPING",
    "EVAL_SPLITS",
    "TRAIN_SPLIT",
    "cluster_of",
    "ledger_counts",
    "protocol",
    "setting_key",
]

#: What each ``--eval-split`` trains on: the protocol's fit conversations.
TRAIN_SPLIT = "fit"
#: The held-out parts an evaluation may read (``--eval-split``): validation chooses, test reports.
EVAL_SPLITS = ("validation", "test")
#: Arguments that do not change a setting (seed: a setting is judged over seeds).
BOOKKEEPING = frozenset({"seed", "out", "ledger", "quiet", "before_cache", "before_only", "eval_only",
                         "eval_model", "eval_estimate_s", "threads", "batch", "device"})  # fmt: skip


def cluster_of(item: Any) -> str:
    """The conversation an item is about (``conv-26:q3`` -> ``conv-26``): the unit the intervals resample."""
    return str(getattr(item, "id", item)).split(":", 1)[0]


def setting_key(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """A short hash of the setting, and the setting itself (JSON-able argument values)."""
    setting = {
        k: (str(v) if isinstance(v, Path) else v)
        for k, v in sorted(vars(args).items())
        if k not in BOOKKEEPING
    }
    return hashlib.sha256(json.dumps(setting, sort_keys=True, default=str).encode()).hexdigest()[:12], setting


def _commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent, check=True)  # fmt: skip
        return out.stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def ledger_counts(path: Path, key: str) -> dict[str, int]:
    """Test evaluations recorded in the ledger: of this setting, and of all settings."""
    if not path.is_file():
        return {"of_setting": 0, "all_settings": 0, "settings": 0}
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}: line {n}: not JSON ({e}); the ledger is append-only") from None
    return {"of_setting": sum(r.get("setting_key") == key for r in rows), "all_settings": len(rows),
            "settings": len({r.get("setting_key") for r in rows})}  # fmt: skip


def protocol(args: argparse.Namespace, *, record: bool) -> dict[str, Any]:
    """The protocol's part of a result: the splits, the setting's key and the test ledger's counts. With
    ``record`` and ``--eval-split test``, this run is appended to the ledger first (so it counts itself).
    ``args`` needs ``ledger``, ``eval_split``, ``task``, ``seed`` and ``out``; every other field is part of
    the setting unless :data:`BOOKKEEPING` names it."""
    key, setting = setting_key(args)
    ledger = Path(args.ledger)
    if record and args.eval_split == "test":
        ledger.parent.mkdir(parents=True, exist_ok=True)
        row = {"setting_key": key, "task": args.task, "seed": args.seed, "out": str(args.out),
               "commit": _commit(), "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "pid": os.getpid(),
               "setting": setting}  # fmt: skip
        with ledger.open("a") as f:
            f.write(json.dumps(row, default=str) + "\n")
    return {"train_split": TRAIN_SPLIT, "eval_split": args.eval_split, "setting_key": key,
            "ledger": str(ledger), "test_evaluations": ledger_counts(ledger, key),
            "intervals": "cluster bootstrap over conversations"}  # fmt: skip
