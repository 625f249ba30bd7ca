"""The retrieval evaluation's figures and outputs: recall@k, NDCG@k and all-evidence-found@k (turn and
session level) per mode and category with bootstrap intervals (:func:`summarize`), the markdown report,
the recall plot, the files of ``output_dir`` and the compact JSON the CLI prints (:func:`headline`). Used
by :mod:`memrl.eval.retrieval.run`::

    report = summarize(rows, config)        # rows: one dict per question (evaluate_conversation)
    write_outputs(Path("runs/retrieval"), report, rows)
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from memrl.eval.retrieval.config import CORE_CATEGORIES, EXTRA_LEVELS, RetrievalConfig
from memrl.eval.stats import bootstrap_ci, to_markdown
from memrl.scoring.metrics import LOCOMO_CATEGORIES


def _stat(values: list[float | None], config: RetrievalConfig) -> dict[str, Any]:
    """Mean and 95% interval over the values that exist, and how many there are; ``None`` when none."""
    vals = [v for v in values if v is not None]
    if not vals:
        return {"n": 0, "mean": None, "ci_low": None, "ci_high": None}
    mean, lo, hi = bootstrap_ci(vals, n_resamples=config.bootstrap, seed=config.seed)
    return {"n": len(vals), "mean": mean, "ci_low": lo, "ci_high": hi}


#: LoCoMo's retrieval settings were tuned on the first five conversations; the rest are held out.
TUNING_CONVERSATIONS = 5


def halves(rows: list[dict[str, Any]], mode: str, k: str = "10") -> dict[str, float | None]:
    """Recall@k (categories 1-4 pooled) on the tuning conversations (the first five, in data order) and
    on the held-out rest: ``{"conv 0-4": r, "conv 5-9": r}``; ``{}`` with five conversations or fewer."""
    order = list(dict.fromkeys(r.get("conversation") for r in rows))
    if len(order) <= TUNING_CONVERSATIONS:
        return {}
    tuning = set(order[:TUNING_CONVERSATIONS])
    out: dict[str, list[float]] = {"tuning": [], "heldout": []}
    for r in rows:
        v = r["recall"].get(mode, {}).get(k)
        if v is not None and (r["category_id"] is None or r["category_id"] in CORE_CATEGORIES):
            out["tuning" if r.get("conversation") in tuning else "heldout"].append(v)
    last = len(order) - 1
    return {
        f"conv 0-{TUNING_CONVERSATIONS - 1}": sum(out["tuning"]) / len(out["tuning"])
        if out["tuning"]
        else None,
        f"conv {TUNING_CONVERSATIONS}-{last}": sum(out["heldout"]) / len(out["heldout"])
        if out["heldout"]
        else None,
    }


#: The per-question figures summarised, each as ``{level}_at_k``: the recalls first (the headline's).
LEVELS = ("recall", "session_recall", *EXTRA_LEVELS)


def summarize(rows: list[dict[str, Any]], config: RetrievalConfig) -> dict[str, Any]:
    """Per mode: recall@k, NDCG@k and all-found@k (turn and session level) per category and pooled
    (LoCoMo: categories 1-4). A row without a figure (one written before it existed) counts as none."""
    locomo = any(r["category_id"] is not None for r in rows)
    groups: dict[str, list[dict[str, Any]]] = (
        {LOCOMO_CATEGORIES[c]: [] for c in config.categories} if locomo else {}
    )
    for r in rows:
        groups.setdefault(r["category"], []).append(r)
    core = [r for r in rows if r["category_id"] is None or r["category_id"] in CORE_CATEGORIES]
    pools = {**groups, "overall": core}
    if config.include_adversarial:
        pools["all"] = rows
    modes: dict[str, Any] = {}
    for mode in config.modes:
        m: dict[str, Any] = {f"{level}_at_k": {} for level in LEVELS}
        m["by_category"] = {}
        for name, pool in pools.items():
            cat: dict[str, Any] = {"n": len(pool), **{f"{level}_at_k": {} for level in LEVELS}}
            for k in config.k:
                for level in LEVELS:
                    values = [r.get(level, {}).get(mode, {}).get(str(k)) for r in pool]
                    cat[f"{level}_at_k"][str(k)] = _stat(values, config)
            m["by_category"][name] = cat
        for level in LEVELS:
            key = f"{level}_at_k"
            m[key] = {k: v["mean"] for k, v in m["by_category"]["overall"][key].items()}
        m["recall_at_10_halves"] = halves(rows, mode)  # tuning vs held-out conversations
        modes[mode] = m
    headline_mode = "hybrid" if "hybrid" in config.modes else config.modes[0]
    return {
        "recall_at_10": modes[headline_mode]["recall_at_k"].get("10"),
        "headline_mode": headline_mode,
        "n_questions": len(core),
        "n_questions_all": len(rows),
        # how many questions the headline rests on (the others have no evidence to find)
        "n_with_evidence": modes[headline_mode]["by_category"]["overall"]["recall_at_k"][str(max(config.k))][
            "n"
        ]
        if config.k
        else 0,
        "modes": modes,
    }


def _fmt(value: float | None) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def _ci(s: dict[str, Any]) -> str:
    return "-" if s.get("ci_low") is None else f"{s['ci_low']:.3f}-{s['ci_high']:.3f}"


def report_markdown(report: dict[str, Any]) -> str:
    """Markdown: a recall@k table per mode (rows: categories, then overall), with 95% intervals."""
    cfg = report.get("config", {})
    lines = [
        f"# Retrieval evaluation: {cfg.get('dataset', '?')} (raw builder, "
        + ("LLM-written keys, no LLM at query time)" if report.get("enrich") else "no LLM)"),
        "",
        f"{report['n_questions']} questions ({report.get('n_with_evidence', '?')} with evidence) in "
        f"{report.get('n_conversations', '?')} conversations, {report.get('n_turns', '?')} turns; embedder "
        f"{report.get('embedder', '?')}; wall time {report.get('wall_time_s', '?')} s (embedding "
        f"{report.get('embed_time_s', '?')} s).",
        *_enrich_line(report.get("enrich")),
        f"Headline: **recall@10 = {_fmt(report['recall_at_10'])}** ({report['headline_mode']}, pooled"
        + (", LoCoMo categories 1-4" if cfg.get("dataset") in ("locomo", "sample") else "")
        + "). Recall is per evidence id; a retrieved id is one turn or memory. n = questions with evidence.",
        "NDCG@k: binary relevance, LongMemEval's discount (ranks 1 and 2 weigh 1, rank r > 2 weighs "
        "1/log2 r); all@k: share of questions with all their evidence found (LongMemEval's recall_all). "
        "Their session level ranks the first k distinct sessions of the turn ranking (as LongMemEval), "
        "while the session recall counts the sessions of the first k turns.",
        *_halves_line(report),
        *_corrected_line(report),
    ]
    if cfg:
        lines += ["", "Config: `" + json.dumps(cfg, default=str) + "`"]
    for mode, m in report["modes"].items():
        for level, title in (("recall_at_k", "turn"), ("session_recall_at_k", "session")):
            table = []
            for cat, c in m["by_category"].items():
                row: dict[str, Any] = {"category": cat, "n": c[level][next(iter(c[level]))]["n"]}
                for k, s in c[level].items():
                    row[f"@{k}"] = _fmt(s["mean"])
                    row[f"@{k} 95% CI"] = _ci(s)
                table.append(row)
            lines += ["", f"## {mode}: {title}-level recall@k", "", to_markdown(table)]
        lines += ["", f"## {mode}: NDCG@k and all@k", "", to_markdown(_ranking_table(m))]
    return "\n".join(lines) + "\n"


def _ranking_table(m: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows (category, turn / session level): NDCG@k and all@k means (intervals in summary.json)."""
    table = []
    for cat, c in m["by_category"].items():
        for title, prefix in (("turn", ""), ("session", "session_")):
            ndcg, found = c[f"{prefix}ndcg_at_k"], c[f"{prefix}recall_all_at_k"]
            row: dict[str, Any] = {"category": cat, "level": title, "n": next(iter(ndcg.values()))["n"]}
            row.update({f"NDCG@{k}": _fmt(s["mean"]) for k, s in ndcg.items()})
            row.update({f"all@{k}": _fmt(s["mean"]) for k, s in found.items()})
            table.append(row)
    return table


def plot(report: dict[str, Any], path: Path) -> None:
    """recall@k per category (one line each), one panel per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(report["modes"])
    fig, axes = plt.subplots(1, len(modes), figsize=(4.2 * len(modes), 3.6), sharey=True, squeeze=False)
    for ax, mode in zip(axes[0], modes, strict=True):
        for cat, c in report["modes"][mode]["by_category"].items():
            ks = [int(k) for k in c["recall_at_k"]]
            ys = [c["recall_at_k"][str(k)]["mean"] for k in ks]
            ys = [math.nan if y is None else y for y in ys]
            ax.plot(ks, ys, marker="o", label=cat, linewidth=2.5 if cat == "overall" else 1.2)
        ax.set_title(mode)
        ax.set_xlabel("k (turns)")
        ax.set_xscale("log")
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("evidence recall@k")
    axes[0][0].set_ylim(0, 1)
    axes[0][-1].legend(fontsize=8, loc="lower right")
    fig.suptitle(f"{report.get('config', {}).get('dataset', '')} evidence recall@k, raw builder")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(out: Path, report: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with (out / "questions.jsonl").open("w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    (out / "summary.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "report.md").write_text(report_markdown(report))
    plot(report, out / "recall.png")


def _enrich_line(enrich: dict[str, Any] | None) -> list[str]:
    if not enrich:
        return []
    return [
        f"Write-time enrichment (LLM at build time, none at query time): {enrich['llm']} wrote keys for "
        f"{enrich['enriched']} of {enrich['items']} turns in {enrich['time_s']} s ({enrich['calls']} calls, "
        f"{enrich['items_per_s']}/s; empty {enrich['empty']}, malformed {enrich['malformed']}, failed "
        f"{enrich['failed']}, nothing new {enrich.get('nothing_new', 0)}; cache hits {enrich.get('cache_hits')}), searched with weight "
        f"{enrich.get('weight')}."
    ]


def _corrected_line(report: dict[str, Any]) -> list[str]:
    """Recall@k against locomo-audit's corrected evidence, beside the original (``--gold corrected``)."""
    c = report.get("corrected")
    if not c:
        return []
    parts = []
    for mode, m in c["modes"].items():
        ks = ", ".join(f"@{k} {_fmt(v)} (original {_fmt(report['modes'][mode]['recall_at_k'].get(k))})"
                       for k, v in m["recall_at_k"].items())  # fmt: skip
        parts.append(f"{mode}: {ks}")
    return [f"Against locomo-audit's corrected evidence ({c['n_corrected']} questions audited, "
            f"{c.get('n_evidence_changed', '?')} with other evidence turns): recall "
            + "; ".join(parts) + "."]  # fmt: skip


def _halves_line(report: dict[str, Any]) -> list[str]:
    parts = [
        f"{mode} " + ", ".join(f"{name} {_fmt(v)}" for name, v in m["recall_at_10_halves"].items())
        for mode, m in report["modes"].items()
        if m.get("recall_at_10_halves")
    ]
    if not parts:
        return []
    return [
        f"Recall@10 on the tuning conversations and the held-out rest (in data order): {'; '.join(parts)}."
    ]


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """The compact JSON the CLI prints last: recall@10 (hybrid, cat 1-4); per mode the pooled recall@k,
    NDCG@k and all@k (turn and session level); per category recall@k."""
    modes = {}
    for mode, m in report["modes"].items():
        modes[mode] = {
            **{f"{level}_at_k": m[f"{level}_at_k"] for level in LEVELS},
            **({"recall_at_10_halves": m["recall_at_10_halves"]} if m.get("recall_at_10_halves") else {}),
            "by_category": {
                cat: {
                    "n": next(iter(c["recall_at_k"].values()))["n"],
                    **{
                        k: None if s["mean"] is None else round(s["mean"], 4)
                        for k, s in c["recall_at_k"].items()
                    },
                }
                for cat, c in m["by_category"].items()
            },  # fmt: skip
        }
    return {
        "dataset": report.get("config", {}).get("dataset"),
        "recall_at_10": report["recall_at_10"],
        "n_questions": report["n_questions"],
        "n_with_evidence": report.get("n_with_evidence"),
        "n_turns": report.get("n_turns"),
        "wall_time_s": report.get("wall_time_s"),
        "embed_time_s": report.get("embed_time_s"),
        **({"enrich": report["enrich"]} if report.get("enrich") else {}),
        **({"corrected": report["corrected"]} if report.get("corrected") else {}),
        "modes": modes,
    }
