"""Turning a QA run's per-question rows into a summary (JSON), a markdown report and a PNG plot.

Failures are first-class: questions whose answer failed, and judgements that failed, are counted and
listed, and are excluded from the scores they could not produce (never counted as wrong or right).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

from memrl.eval.qa import aggregate as agg
from memrl.eval.qa.aggregate import ADVERSARIAL
from memrl.eval.qa.report_markdown import markdown  # noqa: F401  (re-exported: memrl eval prints it)
from memrl.eval.stats import bootstrap_ci


def latest_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last row per question (a resumed run appends a success after a failure)."""
    by_id: dict[str, dict[str, Any]] = {}
    for r in rows:
        by_id[r["question_id"]] = r
    return list(by_id.values())


def _clean(x: Any) -> Any:
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


def _order(category: str, category_id: int | None) -> tuple[int, float, str]:
    """Sort key of a category: LoCoMo's number, then context lengths by size ("7k" < "14k"), then name."""
    from memrl.data.ruler import Length, parse_lengths

    try:
        (length,) = parse_lengths(category)
    except (ValueError, TypeError):
        length = Length(category)
    size = length.tokens or length.docs or 0
    return (category_id or 99, size, category)


def length_table(rows: list[dict[str, Any]], labels: dict[Any, str]) -> list[dict[str, Any]]:
    """MemAgent's table: per length (category) accuracy with its 95% interval, sub-EM, F1, and the mean
    seconds and tokens (prompt + completion) per answered question; then the overall row."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["_cat"], []).append(r)
    out = []
    for key, group in [*sorted(groups.items()), ("overall", rows)]:
        if not group:
            continue
        acc, lo, hi = bootstrap_ci([r["accuracy"] for r in group])
        out.append({
            "category": labels.get(key, key), "n": len(group), "accuracy": acc, "ci_low": lo, "ci_high": hi,
            "sub_em": bootstrap_ci([r["sub_em"] for r in group])[0],
            "f1": bootstrap_ci([r["f1"] for r in group])[0],
            "seconds_per_question": sum(r.get("latency_s", 0.0) for r in group) / len(group),
            "tokens_per_question": sum(r.get("prompt_tokens", 0) + r.get("completion_tokens", 0) for r in group)
            / len(group),
        })  # fmt: skip
    return out


def summarize(
    cfg: Any, builds: list[dict[str, Any]], predictions: list[dict[str, Any]], convs: list[Any]
) -> dict:
    # Predictions are appended as answers finish, so their order varies from run to run; the bootstrap
    # resamples by position, so rows go back into the data set's question order first (same answers ->
    # same intervals, whatever order they finished in).
    position = {q.id: i for i, q in enumerate(q for c in convs for q in c.questions)}
    rows = sorted(
        latest_rows(predictions),
        key=lambda r: (position.get(r["question_id"], len(position)), r["question_id"]),
    )
    answered = [r for r in rows if r.get("prediction") is not None]
    failed = [r for r in rows if r.get("error")]
    judged = [r for r in answered if r.get("judge") is not None]
    judge_failed = [r for r in answered if r.get("judge_error")]
    order = {r["category"]: _order(r["category"], r.get("category_id")) for r in rows}
    for r in rows:
        r["_cat"] = order[r["category"]]
    labels = {v: v[-1] for v in order.values()}
    by_order = lambda r: order[r["category"]]  # noqa: E731
    # One rule for LoCoMo's category 5: never in "overall"; its own row and its own figures.
    headline = [r for r in answered if r.get("category") != ADVERSARIAL]
    f1 = agg.headline(rows, "f1")
    summary: dict[str, Any] = {
        "dataset": cfg.dataset,
        "builder": cfg.builder,
        "updater": cfg.updater,
        "provider": cfg.provider,
        "model": cfg.model,
        "judge_model": cfg.judge_model,
        "gold": getattr(cfg, "gold", "original"),
        "system": getattr(cfg, "system", "memrl"),
        "system_name": None if getattr(cfg, "system", "memrl") == "memrl" else cfg.system,
        "top_k": cfg.top_k,
        "n_conversations": len(convs),
        "n_questions": sum(len(c.questions) for c in convs),
        "n_answered": len(answered),
        "n_answer_failures": len(failed),
        "n_format_errors": sum(1 for r in answered if r.get("format_error")),
        "answer_failures": Counter(str(r["error"]).split(":")[0] for r in failed),
        "f1": f1["mean"],
        "f1_ci": f1["ci"],
        "f1_ci_cluster": f1["ci_cluster"],
        "f1_official": f1["official"],
        "f1_official_ci_cluster": f1["official_ci_cluster"],
        "f1_by_category": agg.table(rows, agg.value_fn("f1", official=False), by_order),
        "em": bootstrap_ci([r["em"] for r in headline])[0],
        "bleu1": bootstrap_ci([r["bleu1"] for r in headline])[0],
        "evidence_recall": bootstrap_ci([r.get("evidence_recall") for r in headline])[0],
        "n_judged": len(judged),
        "n_judge_failures": len(judge_failed),
        "adversarial": agg.adversarial_figures(rows),
    }
    if any("accuracy" in r for r in answered):  # documents data sets: MemAgent's evaluation
        scored = [r for r in answered if "accuracy" in r]
        summary["accuracy"], lo, hi = bootstrap_ci([r["accuracy"] for r in scored])
        summary["accuracy_ci"] = [lo, hi]
        summary["sub_em"] = bootstrap_ci([r["sub_em"] for r in scored])[0]
        summary["length_table"] = length_table(scored, labels)
    if judged or getattr(cfg, "judge_model", None):
        summary["judge"] = judge_record(cfg)
    if judged:
        j = agg.headline(rows, "judge")
        summary.update(judge_accuracy=j["mean"], judge_accuracy_ci=j["ci"], judge_accuracy_ci_cluster=j["ci_cluster"],
                       judge_accuracy_official=j["official"],
                       judge_accuracy_official_ci_cluster=j["official_ci_cluster"])  # fmt: skip
        summary["judge_by_category"] = agg.table(rows, agg.value_fn("judge", official=False), by_order)
        if cfg.dataset == "longmemeval":
            summary["longmemeval"] = agg.longmemeval_figures(rows)
    if any("corrected" in r for r in rows):
        summary["corrected"] = agg.corrected_figures(rows, by_order)
    if cfg.builder == "full":
        summary["full_context"] = full_context_figures(rows)
    summary["cost"] = cost_table(builds, rows)
    tokens = [r.get("prompt_tokens", 0) + r.get("completion_tokens", 0) for r in answered]
    summary["answer_tokens_per_question"] = sum(tokens) / len(tokens) if tokens else None
    sessions = [b for b in builds if isinstance(b.get("session"), int) and b["session"] > 0]
    memories = [b for b in builds if b.get("session") == 0]  # a data set's own memories (PerLTQA)
    summary["build"] = {
        "sessions": len(sessions),
        "llm_calls": sum(b.get("llm_calls", 0) for b in sessions),
        "prompt_tokens": sum(b.get("prompt_tokens", 0) for b in sessions),
        "completion_tokens": sum(b.get("completion_tokens", 0) for b in sessions),
        "seconds": round(sum(b.get("seconds", 0.0) for b in sessions), 2),
        "failures": sum(len(b.get("failures", [])) for b in sessions),
        "memories": sum(b.get("stats", {}).get("memories", 0) for b in memories),  # the data set's own
        "actions_applied": sum(b.get("stats", {}).get("actions_applied", 0) for b in sessions),
    }
    updates = [b for b in builds if b.get("session") == "update"]
    if updates:
        latest = list({b["namespace"]: b for b in updates}.values())  # a resumed run redoes failed episodes
        summary["update"] = {
            "episodes": len(latest),
            "attempts": len(updates),
            "failed_episodes": sum(1 for b in latest if b.get("stop_reason") == "failure"),
            # cost counts every attempt (it was spent); failures are those of each episode's last attempt
            "llm_calls": sum(b.get("llm_calls", 0) for b in updates),
            "prompt_tokens": sum(b.get("prompt_tokens", 0) for b in updates),
            "completion_tokens": sum(b.get("completion_tokens", 0) for b in updates),
            "failures": sum(len(b.get("failures", [])) for b in latest),
        }
    if sessions:
        summary["build"]["tokens_per_session"] = (
            summary["build"]["prompt_tokens"] + summary["build"]["completion_tokens"]
        ) / len(sessions)
        summary["build"].update(build_cost_per_session(sessions))
    for r in rows:
        r.pop("_cat", None)
    return _clean(summary)


def build_cost_per_session(sessions: list[dict[str, Any]]) -> dict[str, Any]:
    """What building memory cost a session, on average (prompt and completion tokens, seconds, LLM calls),
    and the live items in the store after the last session built of each namespace (``items_after``;
    None for runs recorded before it was): the builders table's
    cost columns, so a run of any builder shows its cost against raw turns' (0 tokens)."""
    n = len(sessions)
    last: dict[str, dict[str, Any]] = {}
    for b in sessions:
        last[b.get("namespace", "")] = b  # rows are appended in build order
    items = [b.get("items_after") for b in last.values()]  # absent in runs before issue 61
    return {
        "prompt_tokens_per_session": round(sum(b.get("prompt_tokens", 0) for b in sessions) / n, 1),
        "completion_tokens_per_session": round(sum(b.get("completion_tokens", 0) for b in sessions) / n, 1),
        "seconds_per_session": round(sum(b.get("seconds", 0.0) for b in sessions) / n, 2),
        "llm_calls_per_session": round(sum(b.get("llm_calls", 0) for b in sessions) / n, 2),
        "items": sum(i for i in items if isinstance(i, int))
        if any(isinstance(i, int) for i in items)
        else None,
    }


def judge_record(cfg: Any) -> dict[str, Any]:
    """What a report says about its judge: name, template sha256, source, license, model, and the error
    rates ``memrl eval judge-check`` measured for this judge, model and template (None: never measured)."""
    from memrl.eval.qa.judge_rates import find_rates
    from memrl.scoring.judges import get_judge

    spec = get_judge(cfg.judge_name)
    return {**spec.describe(), "model": cfg.judge_model,
            "rates": find_rates(spec, cfg.judge_model, getattr(cfg, "judge_rates", None))}  # fmt: skip


COST_KEYS = ("llm_calls", "prompt_tokens", "completion_tokens", "embed_calls", "seconds")


def cost_table(builds: list[dict[str, Any]], rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The cost columns of a run: the memory system's ingest (every session built) and search (every
    question), and the harness's answerer (its calls and tokens; seconds include the search)."""
    sessions = [b for b in builds if isinstance(b.get("session"), int) and b["session"] > 0]

    def total(items: list[dict[str, Any]], prefix: str = "") -> dict[str, Any]:
        out = {k: sum(i.get(prefix + k) or 0 for i in items) for k in COST_KEYS}
        out["seconds"] = round(out["seconds"], 2)
        return out

    answered = [r for r in rows if r.get("prompt_tokens") or r.get("prediction") is not None]
    answerer = {"llm_calls": len(answered), "prompt_tokens": sum(r.get("prompt_tokens", 0) for r in answered),
                "completion_tokens": sum(r.get("completion_tokens", 0) for r in answered), "embed_calls": 0,
                "seconds": round(sum(r.get("latency_s", 0.0) for r in rows), 2)}  # fmt: skip
    return {"ingest": total(sessions), "search": total(rows, "search_"), "answerer": answerer}


def full_context_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``--builder full``: how many questions saw the whole conversation, how many only its latest turns
    (truncated) or none (skipped), and the turns dropped."""
    seen = [r for r in rows if "context_fit" in r]
    cut = [r for r in seen if not r["context_fit"]]
    return {
        "window": next((r.get("context_window") for r in seen if r.get("context_window")), None),
        "n_whole": len(seen) - len(cut),
        "n_truncated": sum(1 for r in cut if not str(r.get("error") or "").startswith("context:")),
        "n_skipped": sum(1 for r in cut if str(r.get("error") or "").startswith("context:")),
        "turns_dropped_mean": sum(r["context_turns_dropped"] for r in cut) / len(cut) if cut else 0.0,
    }


def verdict_rows(predictions: list[dict[str, Any]], convs: list[Any]) -> list[dict[str, Any]]:
    """The latest row of every question, in the data set's order (what ``verdicts.jsonl`` keeps)."""
    position = {q.id: i for i, q in enumerate(q for c in convs for q in c.questions)}
    return sorted((r for r in latest_rows(predictions) if r["question_id"] in position),
                  key=lambda r: position[r["question_id"]])  # fmt: skip


def write_report(out: Path, summary: dict[str, Any], verdicts: list[dict[str, Any]] | None = None) -> None:
    """``summary.json``, ``report.md``, ``scores.png`` and, given the rows, ``verdicts.jsonl``."""
    from memrl.eval.qa.verdicts import write_verdicts

    out = Path(out)
    if verdicts is not None:
        write_verdicts(out / "verdicts.jsonl", verdicts)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    (out / "report.md").write_text(markdown(summary))
    plot(out / "scores.png", summary)


def plot(path: Path, s: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = [("F1", s["f1_by_category"])]
    if s.get("length_table"):
        acc = [{"category": r["category"], "mean": r["accuracy"], "ci_low": r["ci_low"], "ci_high": r["ci_high"]}
               for r in s["length_table"]]  # fmt: skip
        series.insert(0, ("accuracy", acc))
    if s.get("judge_by_category"):
        series.append(("judge accuracy", s["judge_by_category"]))
    cats = [r["category"] for r in s["f1_by_category"]]
    fig, ax = plt.subplots(figsize=(max(5, 1.3 * len(cats) + 2), 3.6))
    width = 0.8 / len(series)
    for i, (name, table) in enumerate(series):
        by = {r["category"]: r for r in table}
        xs = [j + i * width for j in range(len(cats))]
        # a category with nothing scored gets no bar (not a 0 bar) and an "n/a" mark
        means = [by.get(c, {}).get("mean") for c in cats]
        means = [math.nan if m is None else m for m in means]
        lo = [
            0.0 if math.isnan(m) else m - (by[c].get("ci_low") or m) for m, c in zip(means, cats, strict=True)
        ]
        hi = [
            0.0 if math.isnan(m) else (by[c].get("ci_high") or m) - m
            for m, c in zip(means, cats, strict=True)
        ]
        ax.bar(xs, means, width, yerr=[lo, hi], capsize=3, label=name)
        for x, m in zip(xs, means, strict=True):
            if math.isnan(m):
                ax.text(x, 0.02, "n/a", ha="center", fontsize=7)
    ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(cats))], cats, rotation=20)
    ax.set_ylim(0, 1)
    ax.set_ylabel("score (95% CI)")
    ax.set_title(
        f"{s['dataset']} / {s['builder']} ({s['n_answered']} answered, {s['n_answer_failures']} failed)"
    )
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
