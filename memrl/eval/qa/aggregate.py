"""Honest aggregation of a QA run's per-question verdicts: two modes, conversation-cluster intervals, one
rule for LoCoMo's category 5, LongMemEval's own figures, and both gold keys.

- **memrl's mode** (``f1``, ``judge_accuracy``): a question whose answer failed (provider error), or whose
  judgement failed, is left out of the score and counted (``n_answer_failures``, ``n_judge_failures``).
- **official mode** (``*_official``): as LongMemEval's and MemBuilder's scripts count, every selected
  question is in the denominator and a failure scores 0 (wrong).
- **Intervals**: ``*_ci`` resamples questions; ``*_ci_cluster`` resamples conversations, then questions
  within them (:func:`memrl.eval.stats.cluster_bootstrap_ci`): questions about one conversation share its
  memory, so the cluster interval is the honest one (2-3x wider on three LoCoMo conversations).
- **Category 5** (LoCoMo's adversarial questions, ``--include-adversarial``) is never pooled into
  "overall": it has its own row after it, in every table and headline.
- **LongMemEval** (:func:`longmemeval_figures`): accuracy per question type, the task-averaged accuracy
  (mean over types) and the abstention accuracy (``_abs`` questions), as its ``print_qa_metrics`` reports.
- **Corrected gold** (``--gold corrected``): the same figures against locomo-audit's answer key, beside
  the original ones (:func:`corrected_figures`).

A row is a dict with ``category``, ``conversation``, ``prediction`` (None: the answer failed), ``f1``,
``judge`` (True/False/None) and, with corrected gold, ``corrected`` (``f1``, ``judge``, ...).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from memrl.eval.stats import bootstrap_ci, cluster_bootstrap_ci

ADVERSARIAL = "adversarial"
Value = Callable[[dict[str, Any]], float | None]


def interval(values: list[float | None], clusters: list[Any], seed: int = 0) -> dict[str, Any]:
    """``{n, mean, ci_low, ci_high, cluster_low, cluster_high}`` over the values that exist (None: left
    out). When every conversation holds one question (LongMemEval) the two intervals are the same one."""
    kept = [(v, c) for v, c in zip(values, clusters, strict=True) if v is not None and not _nan(v)]
    if not kept:
        return {
            "n": 0,
            "mean": None,
            "ci_low": None,
            "ci_high": None,
            "cluster_low": None,
            "cluster_high": None,
        }
    vals = [float(v) for v, _ in kept]
    mean, lo, hi = bootstrap_ci(vals, seed=seed)
    if len({c for _, c in kept}) == len(kept):  # singleton clusters: the cluster bootstrap is this one
        clo, chi = lo, hi
    else:
        _, clo, chi = cluster_bootstrap_ci(vals, [c for _, c in kept], seed=seed)
    return {
        "n": len(vals),
        "mean": mean,
        "ci_low": lo,
        "ci_high": hi,
        "cluster_low": clo,
        "cluster_high": chi,
    }


def _nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def answered(r: dict[str, Any]) -> bool:
    return r.get("prediction") is not None


def value_fn(key: str, *, official: bool, corrected: bool = False) -> Value:
    """The per-question value of ``key`` (``f1``, ``judge``, ...): memrl's mode gives None for a failure
    (left out), the official mode 0.0. A judge verdict is 1.0 / 0.0."""

    def get(r: dict[str, Any]) -> float | None:
        src = r.get("corrected") or r if corrected else r
        v = src.get(key) if answered(r) else None
        if isinstance(v, bool):
            v = 1.0 if v else 0.0
        if v is None:
            return 0.0 if official else None
        return float(v)

    return get


def pooled(rows: Iterable[dict[str, Any]], fn: Value) -> dict[str, Any]:
    rows = list(rows)
    return interval([fn(r) for r in rows], [r.get("conversation") for r in rows])


def table(
    rows: list[dict[str, Any]], fn: Value, order: Callable[[dict[str, Any]], Any]
) -> list[dict[str, Any]]:
    """One row per category (sorted by ``order``), then ``overall`` (category 5 left out), then the
    adversarial row, when there is one: ``{category, n, mean, ci_low, ci_high, cluster_low, cluster_high}``."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(rows, key=order):
        groups.setdefault(r["category"], []).append(r)
    out = [{"category": c, **pooled(g, fn)} for c, g in groups.items() if c != ADVERSARIAL]
    out.append({"category": "overall", **pooled([r for r in rows if r["category"] != ADVERSARIAL], fn)})
    if ADVERSARIAL in groups:
        out.append({"category": ADVERSARIAL, **pooled(groups[ADVERSARIAL], fn)})
    return [r for r in out if r["n"] or r["category"] == "overall"]


def headline(rows: list[dict[str, Any]], key: str, *, corrected: bool = False) -> dict[str, Any]:
    """Both modes of one figure over the headline questions (category 5 apart):
    ``{key: mean, key_ci, key_ci_cluster, key_official, key_official_ci_cluster, ...}``."""
    core = [r for r in rows if r["category"] != ADVERSARIAL]
    ours = pooled(core, value_fn(key, official=False, corrected=corrected))
    official = pooled(core, value_fn(key, official=True, corrected=corrected))
    return {
        "mean": ours["mean"], "n": ours["n"], "ci": [ours["ci_low"], ours["ci_high"]],
        "ci_cluster": [ours["cluster_low"], ours["cluster_high"]],
        "official": official["mean"], "official_n": official["n"],
        "official_ci_cluster": [official["cluster_low"], official["cluster_high"]],
    }  # fmt: skip


def adversarial_figures(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Category 5 on its own: F1 (LoCoMo's rule: says it is not mentioned) and judge accuracy."""
    adv = [r for r in rows if r["category"] == ADVERSARIAL]
    if not adv:
        return None
    out = {"n": len(adv), "f1": pooled(adv, value_fn("f1", official=False))}
    if any(r.get("judge") is not None for r in adv):
        out["judge_accuracy"] = pooled(adv, value_fn("judge", official=False))
        out["judge_accuracy_official"] = pooled(adv, value_fn("judge", official=True))
    return out


def longmemeval_figures(rows: list[dict[str, Any]], *, corrected: bool = False) -> dict[str, Any]:
    """LongMemEval's report: accuracy per question type, task-averaged (mean over the types), overall,
    and abstention accuracy (``answerable`` False), in memrl's mode and the official one."""
    out: dict[str, Any] = {}
    for mode, official in (("memrl", False), ("official", True)):
        fn = value_fn("judge", official=official, corrected=corrected)
        by_type: dict[str, dict[str, Any]] = {}
        for r in sorted(rows, key=lambda r: r["category"]):
            by_type.setdefault(r["category"], {"values": [], "clusters": []})
            by_type[r["category"]]["values"].append(fn(r))
            by_type[r["category"]]["clusters"].append(r.get("conversation"))
        types = {t: interval(g["values"], g["clusters"]) for t, g in by_type.items()}
        means = [t["mean"] for t in types.values() if t["mean"] is not None]
        abstention = [r for r in rows if r.get("answerable") is False]
        out[mode] = {
            "by_type": types,
            "task_averaged": sum(means) / len(means) if means else None,
            "overall": pooled(rows, fn),
            "abstention": pooled(abstention, fn) if abstention else None,
        }
    return out


def corrected_figures(rows: list[dict[str, Any]], order: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    """The headline figures against the corrected answer key (rows without a correction keep their own)."""
    changed = [r for r in rows if r.get("corrected", {}).get("changed_answer")]
    out: dict[str, Any] = {
        "n_corrected": sum(1 for r in rows if r.get("corrected", {}).get("audited")),
        "n_answers_changed": len(changed),
        "f1": headline(rows, "f1", corrected=True),
        "f1_by_category": table(rows, value_fn("f1", official=False, corrected=True), order),
        "evidence_recall": pooled([r for r in rows if r["category"] != ADVERSARIAL],
                                  value_fn("evidence_recall", official=False, corrected=True)),
    }  # fmt: skip
    if any(r.get("judge") is not None for r in rows):
        out["judge_accuracy"] = headline(rows, "judge", corrected=True)
        out["judge_by_category"] = table(rows, value_fn("judge", official=False, corrected=True), order)
    return out
