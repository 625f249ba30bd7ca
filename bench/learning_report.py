"""The learning benchmark's verdict: before, after and the trivial baselines on the same items, paired.

Every system (the untrained model, the trained one, each rule of :mod:`bench.learning_baselines`) is a list of
per-item score rows in the same item order. :func:`verdict` compares them on one metric (LoCoMo's
official F1, x100, for reports):

* ``best_trivial``: the rule with the highest mean on these items (the most demanding comparison);
* ``gain_ci_low``/``gain_ci_high``: paired 95% interval of *after minus the better of before and the best
  trivial rule*, per item (10,000 resamples, seed 0): a cluster bootstrap when the items' conversations
  are given (``clusters``), since questions about one conversation are not independent;
* ``gain``: True only when the interval excludes 0 upwards, i.e. after beats both before and the best
  trivial rule (each paired comparison is also reported).

:func:`by_category` gives EM and F1 per LoCoMo category (1 multi-hop, 2 temporal, 3 open-domain,
4 single-hop; 5 adversarial reported apart as abstention), :func:`write_predictions` keeps every prediction
as JSONL beside the figures.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def mean(rows: Sequence[Mapping[str, float]], key: str) -> float:
    return 100 * sum(r[key] for r in rows) / max(1, len(rows))


def paired(a: Sequence[Mapping[str, float]], b: Sequence[Mapping[str, float]], key: str,
           clusters: Sequence[Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """Mean of b - a per item on metric ``key`` (x100) with its paired bootstrap 95% interval (a two-stage
    cluster bootstrap over ``clusters``, one label per item, when given): :func:`memrl.eval.stats.paired_difference`."""
    from memrl.eval.stats import paired_difference

    return paired_difference([x[key] for x in a], [y[key] for y in b], clusters, scale=100)


def verdict(before: Sequence[Mapping[str, float]], after: Sequence[Mapping[str, float]],
            trivial: Mapping[str, Sequence[Mapping[str, float]]], key: str = "f1",
            clusters: Sequence[Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """The benchmark's figures on metric ``key`` (see the module docstring)."""
    best_rule = max(trivial, key=lambda r: mean(trivial[r], key))
    ref_name, ref = (
        ("before", before)
        if mean(before, key) >= mean(trivial[best_rule], key)
        else (best_rule, trivial[best_rule])
    )
    gain = paired(ref, after, key, clusters)
    return {
        "metric": key,
        "before": round(mean(before, key), 2),
        "after": round(mean(after, key), 2),
        "best_trivial": round(mean(trivial[best_rule], key), 2),
        "best_trivial_rule": best_rule,
        "trivial": {r: round(mean(rows, key), 2) for r, rows in trivial.items()},
        "gain_reference": ref_name,
        "gain_ci_low": gain["ci"][0],
        "gain_ci_high": gain["ci"][1],
        "gain": bool(gain["ci"][0] > 0),
        "after_vs_before": paired(before, after, key, clusters),
        "after_vs_best_trivial": paired(trivial[best_rule], after, key, clusters),
    }


def by_category(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """EM and official F1 (x100) per LoCoMo category, with counts; category 5 is abstention."""
    out: dict[str, dict[str, float]] = {}
    for cat in sorted({int(r["category"]) for r in rows}):
        sel = [r for r in rows if int(r["category"]) == cat]
        name = CATEGORY_NAMES.get(cat, str(cat)) + (" (abstention)" if cat == 5 else "")
        out[name] = {"n": len(sel), "em": round(mean(sel, "em"), 2), "f1": round(mean(sel, "f1"), 2)}
    return out


def write_predictions(
    path: Path, items: Sequence[Any], systems: Mapping[str, Sequence[Mapping[str, Any]]]
) -> None:
    """One JSON line per (system, item): id, category, question, golds, prediction, scores."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for system, rows in systems.items():
            for it, r in zip(items, rows, strict=True):
                f.write(json.dumps({"system": system, "id": it.id, "category": it.category, "question": it.question,
                                    "answers": list(it.answers), **r}, ensure_ascii=False) + "\n")  # fmt: skip


def rules_report(task: str, items: Sequence[Any], trivial: Mapping[str, Sequence[Mapping[str, Any]]],
                 rules: Any, out: Path, t0: float, **extra: Any) -> dict[str, Any]:  # fmt: skip
    """``--baselines-only``: the rules' predictions written to OUT/predictions.jsonl, and the result: official
    F1 / EM x100 overall and per category, which rule each category uses, the command and the wall time."""
    import sys
    import time

    write_predictions(out / "predictions.jsonl", items, trivial)
    return {
        "task": task, "baselines_only": True, "n_eval": len(items), **extra,
        "overall": {n: {"em": round(mean(r, "em"), 2), "f1": round(mean(r, "f1"), 2)} for n, r in trivial.items()},
        "by_category": {n: by_category([{**x, "category": it.category} for x, it in zip(r, items, strict=True)])
                        for n, r in trivial.items()},
        "rule_per_category": {str(c): r for c, r in sorted(rules.by_category.items())}, "top1_text_chars": rules.n_chars,
        "predictions": str(out / "predictions.jsonl"), "command": "python -m bench.learning " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d"), "wall_time_s": round(time.perf_counter() - t0, 1),
    }  # fmt: skip


def markdown(result: Mapping[str, Any]) -> str:
    """Tables for docs/results/learning.md: each system by category, then the paired comparisons."""
    systems = result["by_category"]
    cats = list(next(iter(systems.values())))
    lines = ["| system | " + " | ".join(f"{c} (n={next(iter(systems.values()))[c]['n']})" for c in cats) + " | all |",
             "|---|" + "---:|" * (len(cats) + 1)]  # fmt: skip
    for name, table in systems.items():
        cells = [f"{table[c]['em']:.1f} / {table[c]['f1']:.1f}" for c in cats]
        lines.append(
            f"| {name} | "
            + " | ".join(cells)
            + f" | {result['overall'][name]['em']:.1f} / {result['overall'][name]['f1']:.1f} |"
        )
    lines += ["", "EM / official LoCoMo F1, x100.", "",
              "| comparison (official F1) | paired diff (95% CI) |", "|---|---:|"]  # fmt: skip
    for name in ("after_vs_before", "after_vs_best_trivial", "sft_over_before", "rl_over_sft"):
        if name not in result:
            continue
        p = result[name]
        lines.append(
            f"| {name.replace('_', ' ')} | {p['diff']:+.2f} ({p['ci'][0]:+.2f}..{p['ci'][1]:+.2f}) |"
        )
    return "\n".join(lines) + "\n"
