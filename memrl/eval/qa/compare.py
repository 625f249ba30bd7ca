"""``memrl eval compare RUN_A RUN_B ...``: paired differences between runs on the same questions.

    memrl eval compare runs/locomo-raw runs/locomo-full runs/locomo-mem0 --metric f1,judge

Each run folder holds ``verdicts.jsonl`` (every ``memrl eval`` writes it). Every run after the first is
compared with the first on the questions both answered (paired by question id): per question the
difference of the figure (F1, or the judge's verdict as 1/0), its mean and a 95% interval that resamples
conversations, then questions within them (:func:`memrl.eval.stats.cluster_bootstrap_ci`), since
questions about one conversation share its memory. An interval that excludes 0 is a difference; one that
holds 0 is not evidence of one. Per category too (LoCoMo's category 5 on its own line, never in
overall). ``--mode official`` counts failed answers and judge failures as 0 on both sides; memrl's mode
(default) pairs only questions scored in both runs. ``--gold corrected`` uses the corrected key's figures
of runs made with ``--gold corrected``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memrl.eval.qa.aggregate import ADVERSARIAL, value_fn
from memrl.eval.qa.verdicts import read_verdicts
from memrl.eval.stats import cluster_bootstrap_ci, to_markdown


def paired(
    base: list[dict[str, Any]], other: list[dict[str, Any]], metric: str, *, official: bool, corrected: bool
) -> list[tuple[dict[str, Any], float, float]]:
    """``(row, base value, other value)`` for the questions both runs scored (official: both answered or
    not, failures 0)."""
    fn = value_fn(metric, official=official, corrected=corrected)
    theirs = {r["question_id"]: r for r in other}
    out = []
    for r in base:
        o = theirs.get(r["question_id"])
        if o is None:
            continue
        a, b = fn(r), fn(o)
        if a is not None and b is not None:
            out.append((r, a, b))
    return out


def difference(pairs: list[tuple[dict[str, Any], float, float]]) -> dict[str, Any]:
    if not pairs:
        return {"n": 0, "base": None, "other": None, "diff": None, "ci_low": None, "ci_high": None}
    d = [b - a for _, a, b in pairs]
    mean, lo, hi = cluster_bootstrap_ci(d, [r.get("conversation") for r, _, _ in pairs])
    return {"n": len(pairs), "base": sum(a for _, a, _ in pairs) / len(pairs),
            "other": sum(b for _, _, b in pairs) / len(pairs), "diff": mean, "ci_low": lo, "ci_high": hi,
            "conversations": len({r.get("conversation") for r, _, _ in pairs})}  # fmt: skip


def compare_runs(
    runs: Sequence[str], metrics: Sequence[str] = ("f1", "judge"), *, official: bool = False,
    corrected: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """The comparison of every run with the first: per metric, overall and per category."""
    from memrl.errors import ConfigError

    if len(runs) < 2:
        raise ConfigError("memrl eval compare needs two runs or more (folders holding verdicts.jsonl)")
    verdicts = [read_verdicts(r) for r in runs]
    base = verdicts[0]
    out: dict[str, Any] = {"base": runs[0], "mode": "official" if official else "memrl",
                           "gold": "corrected" if corrected else "original", "comparisons": []}  # fmt: skip
    for run, other in zip(runs[1:], verdicts[1:], strict=True):
        ids_a, ids_b = {r["question_id"] for r in base}, {r["question_id"] for r in other}
        entry: dict[str, Any] = {"run": run, "common_questions": len(ids_a & ids_b),
                                 "only_base": len(ids_a - ids_b), "only_other": len(ids_b - ids_a), "metrics": {}}  # fmt: skip
        for metric in metrics:
            pairs = paired(base, other, metric, official=official, corrected=corrected)
            if not pairs:
                continue
            cats: dict[str, list[Any]] = {}
            for p in pairs:
                cats.setdefault(p[0]["category"], []).append(p)
            m = {"overall": difference([p for p in pairs if p[0]["category"] != ADVERSARIAL])}
            m["by_category"] = {c: difference(ps) for c, ps in cats.items() if c != ADVERSARIAL}
            if ADVERSARIAL in cats:
                m[ADVERSARIAL] = difference(cats[ADVERSARIAL])
            if metric == "judge":
                names = {r.get("judge_name") for r in base} | {r.get("judge_name") for r in other}
                m["judges"] = sorted(str(n) for n in names if n)
            entry["metrics"][metric] = m
        out["comparisons"].append(entry)
    return out


def compare_markdown(c: dict[str, Any]) -> str:
    def pct(x: Any) -> str:
        return "-" if x is None else f"{100 * x:.1f}"

    def signed(x: Any) -> str:
        return "-" if x is None else f"{100 * x:+.1f}"

    lines = [f"# Paired comparison with `{c['base']}` ({c['mode']} mode, {c['gold']} gold)", "",
             "diff = run minus base over the questions both scored; 95% CI resamples conversations.", ""]  # fmt: skip
    for e in c["comparisons"]:
        lines += [f"## `{e['run']}`", "", f"{e['common_questions']} questions in common ({e['only_base']} only "
                  f"in the base, {e['only_other']} only in this run).", ""]  # fmt: skip
        for metric, m in e["metrics"].items():
            rows = []
            parts = [("overall", m["overall"]), *m["by_category"].items()]
            if ADVERSARIAL in m:
                parts.append((ADVERSARIAL, m[ADVERSARIAL]))
            for name, d in parts:
                excl = d["ci_low"] is not None and (d["ci_low"] > 0 or d["ci_high"] < 0)
                rows.append({"category": name, "n": d["n"], "base": pct(d["base"]), "run": pct(d["other"]),
                             "diff": signed(d["diff"]), "95% CI": "-" if d["ci_low"] is None else
                             f"{signed(d['ci_low'])} to {signed(d['ci_high'])}", "differs": "yes" if excl else "no"})  # fmt: skip
            title = "judge accuracy" if metric == "judge" else metric
            if m.get("judges") and len(m["judges"]) > 1:
                title += f" (judged by different judges: {', '.join(m['judges'])}; not comparable)"
            lines += [f"### {title}", "", to_markdown(rows), ""]
    return "\n".join(lines)
