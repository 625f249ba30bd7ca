"""Several seeds of ``bench/learning.py``, together: the figure the README states.

    .venv/bin/python bench/learning_seeds.py runs/learning-read-s0 runs/learning-read-s1 runs/learning-read-s2

Each folder is one seed's run (``learning.json`` and ``predictions.jsonl``), all of one task on the same
held-out items (checked: same item ids, same untrained and rule predictions). Reported: each seed's
before / after / best rule and its own paired interval; the mean and standard deviation of *after* over the
seeds; and the seed-averaged verdict: per item, the mean of the seeds' after-scores minus the better of
before and the best rule (chosen on these items, as each seed's verdict does), with its paired bootstrap 95%
interval (10,000 resamples). A gain counts only when that interval excludes 0 upwards.

``--rules PREDICTIONS.jsonl`` adds the rules of a ``bench/learning.py --baselines-only`` run on the same
items to runs made before those rules existed (a rule a run already has must predict the same there).

Writes OUT (default: beside the first run, ``seeds.md``); last line of stdout: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def load_rows(path: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """A predictions file as ``{system: {item id: row}}``."""
    preds: dict[str, dict[str, dict[str, Any]]] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        try:
            row = json.loads(line)
            preds.setdefault(row["system"], {})[row["id"]] = row
        except (json.JSONDecodeError, KeyError) as e:
            raise SystemExit(f"{path}: line {n}: not a prediction row ({e})") from None
    return preds


def load(run: Path) -> tuple[dict[str, Any], dict[str, dict[str, dict[str, Any]]]]:
    """A run's result and its predictions as ``{system: {item id: row}}``."""
    return json.loads((run / "learning.json").read_text()), load_rows(run / "predictions.jsonl")


def summarize(runs: list[Path], rules_file: Path | None = None) -> dict[str, Any]:
    loaded = [load(r) for r in runs]
    if rules_file is not None:
        extra = load_rows(rules_file)
        for run, (_, preds) in zip(runs, loaded, strict=True):
            for system, rows in extra.items():
                if set(rows) != set(preds["after"]):
                    raise SystemExit(f"{rules_file}: its items are not those of {run}")
                preds.setdefault(system, rows)
    first, first_preds = loaded[0]
    key = first.get("metric", "f1")
    ids = list(first_preds["after"])
    fixed = [s for s in first_preds if s != "after"]  # the untrained model and the rules: seed-independent
    for run, (res, preds) in zip(runs, loaded, strict=True):
        if res["task"] != first["task"] or list(preds["after"]) != ids:
            raise SystemExit(f"{run}: not the same task and held-out items as {runs[0]}")
        for s in fixed:
            if s != "after SFT" and [preds[s][i]["prediction"] for i in ids] != [first_preds[s][i]["prediction"] for i in ids]:  # fmt: skip
                raise SystemExit(
                    f"{run}: its '{s}' predictions differ from {runs[0]}'s: not the same setting"
                )
    from learning_report import verdict

    rows = {s: [first_preds[s][i] for i in ids] for s in fixed if s != "after SFT"}
    before = rows.pop("before")
    avg_after = [{key: statistics.fmean(p["after"][i][key] for _, p in loaded)} for i in ids]
    afters = [res["after"] for res, _ in loaded]
    v = verdict(
        before, avg_after, rows, key
    )  # the same reference as each seed's (it does not depend on after)
    return {
        "task": first["task"], "metric": key, "metric_label": first.get("metric_label"), "n_eval": len(ids),
        "seeds": [res["seed"] for res, _ in loaded], "runs": [str(r) for r in runs],
        "per_seed": [per_seed(res, verdict(before, [p["after"][i] for i in ids], rows, key)) for res, p in loaded],
        "before": v["before"], "after_mean": round(statistics.fmean(afters), 2),
        "after_sd": round(statistics.stdev(afters), 2) if len(afters) > 1 else 0.0,
        **{k: v[k] for k in ("best_trivial", "best_trivial_rule", "trivial", "gain_reference", "gain_ci_low",
                             "gain_ci_high", "gain", "after_vs_before")},
        "gain_diff": _diff(v),
    }  # fmt: skip


def _diff(v: dict[str, Any]) -> float:
    """After minus the better of before and the best rule (the paired mean difference)."""
    return v["after_vs_before" if v["gain_reference"] == "before" else "after_vs_best_trivial"]["diff"]


def per_seed(res: dict[str, Any], v: dict[str, Any]) -> dict:
    """One seed's after and its verdict against the rules of all seeds (the same rule set)."""
    return {"seed": res["seed"], "after": res["after"], "diff": _diff(v), "gain_ci_low": v["gain_ci_low"],
            "gain_ci_high": v["gain_ci_high"], "gain": v["gain"], "wall_time_s": res["wall_time_s"]}  # fmt: skip


def markdown(s: dict[str, Any]) -> str:
    lines = [f"`{s['task']}`, {len(s['seeds'])} seeds, {s['n_eval']} held-out items, {s['metric_label']}", "",
             "| seed | before | after | best rule | after minus the better of before and the best rule (95% CI) | wall time (s) |",
             "|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in s["per_seed"]:
        lines.append(f"| {r['seed']} | {s['before']:.2f} | {r['after']:.2f} | {s['best_trivial']:.2f} | "
                     f"{r['diff']:+.2f} ({r['gain_ci_low']:+.2f}..{r['gain_ci_high']:+.2f}) | {r['wall_time_s']:.0f} |")  # fmt: skip
    lines.append(
        f"| mean | {s['before']:.2f} | {s['after_mean']:.2f} ± {s['after_sd']:.2f} | {s['best_trivial']:.2f} "
        f"({s['best_trivial_rule']}) | {s['gain_diff']:+.2f} ({s['gain_ci_low']:+.2f}..{s['gain_ci_high']:+.2f}), "
        f"seed-averaged | |"
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="one learning.py output folder per seed")
    ap.add_argument("--out", type=Path, help="markdown file (default: RUNS[0]/../seeds-TASK.md)")
    ap.add_argument(
        "--rules", type=Path, help="predictions of --baselines-only on the same items (rules to add)"
    )
    args = ap.parse_args(argv)
    s = summarize(args.runs, args.rules)
    out = args.out or args.runs[0].parent / f"seeds-{s['task']}.md"
    out.write_text(markdown(s))
    print(markdown(s))
    print(json.dumps(s))
    return s


if __name__ == "__main__":
    main()
