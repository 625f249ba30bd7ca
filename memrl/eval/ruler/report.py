"""A RULER run's rows as MemAgent's out-of-distribution table: per task, a score (RULER's metric, x100) for
each reader and length, with 95% bootstrap intervals, items skipped (the full prompt does not fit the window)
and failed (provider errors) counted apart and never scored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memrl.eval.stats import bootstrap_ci, to_markdown


def _size(label: str) -> float:
    from memrl.data.ruler import parse_lengths

    return parse_lengths(label)[0].tokens or 0


def summarize(cfg: Any, items: list[Any], predictions: list[dict[str, Any]], *, window: int | None,
              digests: dict[str, str], skipped_tasks: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    from memrl.eval.qa.report import latest_rows

    latest = {r["question_id"]: r for r in latest_rows(predictions)}
    lengths = sorted({i.length for i in items}, key=_size)
    tasks = list(dict.fromkeys(i.task for i in items))
    cells: list[dict[str, Any]] = []
    for task in tasks:
        for length in lengths:
            group = [i for i in items if i.task == task and i.length == length]
            for reader in cfg.reader:
                rows = [latest.get(f"{i.id}/{reader}", {}) for i in group]  # in item order: stable intervals
                scored = [r for r in rows if "score" in r]
                mean, lo, hi = bootstrap_ci([r["score"] for r in scored])
                cells.append({
                    "task": task, "length": length, "reader": reader, "n": len(group), "scored": len(scored),
                    "score": None if not scored else 100 * mean,
                    "ci_low": None if not scored else 100 * lo, "ci_high": None if not scored else 100 * hi,
                    "skipped": sum(1 for r in rows if r.get("skipped")),
                    "failed": sum(1 for r in rows if r.get("error")),
                    "seconds_per_item": _mean([r.get("latency_s") for r in scored]),
                    "tokens_per_item": _mean([r.get("prompt_tokens", 0) + r.get("completion_tokens", 0)
                                              for r in scored]),
                    "prompt_tokens_counted": _mean([i.prompt_tokens for i in group]),
                })  # fmt: skip
    averages = []
    for reader in cfg.reader:
        for length in lengths:
            got = [c["score"] for c in cells if c["reader"] == reader and c["length"] == length]
            full = all(s is not None for s in got)
            averages.append({"reader": reader, "length": length,
                             "score": sum(got) / len(got) if got and full else None})  # fmt: skip
    return {
        "provider": cfg.provider, "model": cfg.model, "tokenizer": cfg.tokenizer, "seed": cfg.seed,
        "questions": cfg.questions, "readers": list(cfg.reader), "tasks": tasks, "lengths": lengths,
        "context_window": window, "memagent": list(cfg.memagent_option),
        "n_items": len(items), "n_scored": sum(c["scored"] for c in cells),
        "n_skipped": sum(c["skipped"] for c in cells), "n_failed": sum(c["failed"] for c in cells),
        "cells": cells, "average": averages, "data_files": digests, "skipped_tasks": skipped_tasks,
    }  # fmt: skip


def _mean(values: list[Any]) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _cell(c: dict[str, Any]) -> str:
    if c["score"] is None:
        why = "skipped" if c["skipped"] else "failed" if c["failed"] else "-"
        return f"- ({why})"
    extra = "".join(f", {c[k]} {k}" for k in ("skipped", "failed") if c[k])
    return f"{c['score']:.1f} ({c['scored']}{extra})"


def markdown(s: dict[str, Any]) -> str:
    model = f"{s['provider']}:{s['model'] or 'default'}"
    lines = [
        "# RULER synthetic tasks", "",
        f"Model `{model}`; lengths in `{s['tokenizer']}` tokens; {s['questions']} item(s) per task and length, "
        f"seed {s['seed']}; full-context window: {s['context_window'] or 'not limited'}. Scores: RULER's "
        "metric x100 (string_match_all; qa: string_match_part), over the scored items (count in brackets); "
        "items that do not fit the window are skipped, failed calls are counted, neither is scored.", "",
        f"- Items: {s['n_items']}; scored {s['n_scored']}, **skipped {s['n_skipped']}, failed {s['n_failed']}**",
    ]  # fmt: skip
    lines += [f"- {t} not run: {why}" for t, why in s["skipped_tasks"].items()]
    for task in s["tasks"]:
        lines += ["", f"## {task}", "", _grid(s, [c for c in s["cells"] if c["task"] == task])]
    if len(s["tasks"]) > 1:
        rows = [{"reader": r, **{a["length"]: "-" if a["score"] is None else f"{a['score']:.1f}"
                                 for a in s["average"] if a["reader"] == r}} for r in s["readers"]]  # fmt: skip
        lines += ["", "## Average over the tasks", "", to_markdown(rows, ["reader", *s["lengths"]])]
    detail = [{**c, "score": _num(c["score"]), "95% CI": "-" if c["score"] is None else
               f"{c['ci_low']:.1f}-{c['ci_high']:.1f}", "s/item": _num(c["seconds_per_item"]),
               "tokens/item": _num(c["tokens_per_item"], 0), "prompt tokens": _num(c["prompt_tokens_counted"], 0)}
              for c in s["cells"]]  # fmt: skip
    lines += ["", "## Every cell", "", to_markdown(detail, ["task", "length", "reader", "n", "scored", "score",
              "95% CI", "skipped", "failed", "s/item", "tokens/item", "prompt tokens"])]  # fmt: skip
    lines += ["", "Data files (sha256):", "", *[f"- `{n}` {d}" for n, d in s["data_files"].items()]]
    lines += ["", "![scores by length](scores.png)"]
    return "\n".join(lines) + "\n"


def _num(x: Any, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _grid(s: dict[str, Any], cells: list[dict[str, Any]]) -> str:
    """Readers down, lengths across (MemAgent's OOD table)."""
    rows = [{"reader": r, **{c["length"]: _cell(c) for c in cells if c["reader"] == r}} for r in s["readers"]]
    return to_markdown(rows, ["reader", *s["lengths"]])


def plot(path: Path, s: dict[str, Any]) -> None:
    """``scores.png``: the average over the tasks by length, one line per reader, then one grid per reader
    (tasks down, lengths across; a cell with nothing scored is left blank and marked)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    readers, lengths, tasks = s["readers"], s["lengths"], s["tasks"]
    fig, axes = plt.subplots(1, 1 + len(readers), figsize=(4.2 + 3.2 * len(readers), 0.32 * len(tasks) + 2.6))
    ax = axes[0]
    for r in readers:
        ys = [
            next((a["score"] for a in s["average"] if a["reader"] == r and a["length"] == n), None)
            for n in lengths
        ]
        ax.plot(range(len(lengths)), [np.nan if y is None else y for y in ys], marker="o", label=r)
    ax.set_xticks(range(len(lengths)), lengths)
    ax.set(ylim=(0, 100), xlabel="context length", ylabel="RULER score x100", title="average over the tasks")
    ax.legend()
    for ax, r in zip(axes[1:], readers, strict=True):
        grid = np.full((len(tasks), len(lengths)), np.nan)
        for c in s["cells"]:
            if c["reader"] == r and c["score"] is not None:
                grid[tasks.index(c["task"]), lengths.index(c["length"])] = c["score"]
        ax.imshow(grid, vmin=0, vmax=100, cmap="viridis", aspect="auto")
        for (i, j), v in np.ndenumerate(grid):
            ax.text(j, i, "-" if np.isnan(v) else f"{v:.0f}", ha="center", va="center", fontsize=7,
                    color="dimgray" if np.isnan(v) else "white" if v < 60 else "black")  # fmt: skip
        ax.set_xticks(range(len(lengths)), lengths)
        ax.set_yticks(range(len(tasks)), tasks, fontsize=7)
        ax.set_title(r)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(out: Path, summary: dict[str, Any]) -> None:
    (Path(out) / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    (Path(out) / "report.md").write_text(markdown(summary))
    plot(Path(out) / "scores.png", summary)
