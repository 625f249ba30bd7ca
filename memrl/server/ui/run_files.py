"""Reading ``memrl eval`` and ``memrl train`` output folders for the web browser (plain data, no HTML).

An evaluation run is a folder with ``predictions.jsonl`` (and usually ``summary.json``, ``report.md``,
``scores.png``, ``config.json``, ``memory.db``); a training run one with ``metrics.jsonl`` (and
``rollouts.jsonl``, ``report.md``, ``reward.png``). :func:`find_runs` looks for both under the folders it
is given (the folders themselves and up to two levels below), so ``memrl ui --runs runs/`` shows every run.

    runs = find_runs(["runs"])
    ev = load_eval(runs["eval/locomo-raw"].path)           # summary, per-question rows, plot path
    rows = filter_questions(ev.rows, category="multi-hop", wrong_only=True)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memrl.eval.qa.report import latest_rows
from memrl.memory.backends import peek_items

#: A predicted answer counts as wrong below this official F1 (when no judge label is present).
WRONG_F1 = 0.5


@dataclass(frozen=True)
class RunRef:
    kind: str  # "eval" or "train"
    name: str  # path relative to its root, "/" separated: the run's id in URLs
    path: Path


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a crash: the rest of the run is still readable
    return rows


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def find_runs(roots: list[str | Path]) -> dict[str, RunRef]:
    """Every evaluation and training run in ``roots`` (each root itself and two levels below), by id."""
    found: dict[str, RunRef] = {}
    for root in map(Path, roots):
        if not root.is_dir():
            continue
        candidates = [root, *root.glob("*"), *root.glob("*/*")]
        for d in sorted(p for p in candidates if p.is_dir()):
            rel = d.relative_to(root).as_posix()
            name = root.name if rel == "." else f"{root.name}/{rel}"
            if (d / "predictions.jsonl").exists() or (d / "summary.json").exists():
                found[f"eval/{name}"] = RunRef("eval", name, d)
            elif (d / "metrics.jsonl").exists():
                found[f"train/{name}"] = RunRef("train", name, d)
    return found


@dataclass
class EvalRun:
    path: Path
    summary: dict[str, Any]
    config: dict[str, Any]
    rows: list[dict[str, Any]]
    report_md: str = ""
    plot: Path | None = None

    @property
    def categories(self) -> list[str]:
        return sorted({str(r.get("category")) for r in self.rows if r.get("category") is not None})


def load_eval(path: Path) -> EvalRun:
    report = path / "report.md"
    plot = path / "scores.png"
    return EvalRun(
        path=path,
        summary=_read_json(path / "summary.json"),
        config=_read_json(path / "config.json"),
        rows=latest_rows(_read_jsonl(path / "predictions.jsonl")),
        report_md=report.read_text(encoding="utf-8") if report.exists() else "",
        plot=plot if plot.exists() else None,
    )


def is_wrong(row: dict[str, Any]) -> bool | None:
    """True/False for an answered question (the judge's label if present, else F1 < 0.5); None if unscored."""
    if row.get("prediction") is None:
        return None
    if row.get("judge") is not None:
        return not row["judge"]
    f1 = row.get("f1")
    return None if f1 is None else f1 < WRONG_F1


def filter_questions(
    rows: list[dict[str, Any]], *, category: str | None = None, wrong_only: bool = False
) -> list[dict[str, Any]]:
    out = [r for r in rows if not category or str(r.get("category")) == category]
    return [r for r in out if is_wrong(r)] if wrong_only else out


def eval_namespace(config: dict[str, Any], conversation: str) -> str | None:
    """The store namespace a run answered a conversation's questions from (its ``--namespace-format``)."""
    fmt = config.get("namespace_format")
    if not fmt:
        return None
    try:
        ns = fmt.format(conv=conversation, builder=config.get("builder", ""))
    except (KeyError, IndexError, ValueError):
        return None
    return ns + ("+memupdate" if config.get("updater") == "memupdate" else "")


def retrieved_memories(run: EvalRun, row: dict[str, Any]) -> list[dict[str, Any]]:
    """The memories a question's answer was given (from the run's ``memory.db``), best first; [] if unknown."""
    ids = row.get("retrieved_ids") or []
    db = Path(run.config.get("db_path") or run.path / "memory.db")
    ns = eval_namespace(run.config, str(row.get("conversation")))
    if not ids or ns is None or not db.exists():
        return []
    return peek_items(db, ns, ids)


@dataclass
class TrainRun:
    path: Path
    metrics: list[dict[str, Any]]
    rollouts: list[dict[str, Any]] = field(default_factory=list)
    report_md: str = ""
    plot: Path | None = None

    def rollouts_of(self, step: int) -> list[dict[str, Any]]:
        return [r for r in self.rollouts if r.get("step") == step]


def load_train(path: Path) -> TrainRun:
    report, plot = path / "report.md", path / "reward.png"
    return TrainRun(
        path=path,
        metrics=_read_jsonl(path / "metrics.jsonl"),
        rollouts=_read_jsonl(path / "rollouts.jsonl"),
        report_md=report.read_text(encoding="utf-8") if report.exists() else "",
        plot=plot if plot.exists() else None,
    )
