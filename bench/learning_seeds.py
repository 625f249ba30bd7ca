"""Several seeds of ``bench/learning.py``, together: the figure the README states.

    .venv/bin/python bench/learning_seeds.py runs/learning-read-s0 runs/learning-read-s1 runs/learning-read-s2

Each folder is one seed's run (``learning.json`` and ``predictions.jsonl``), all of one task on the same
held-out items (checked: same item ids, same untrained and rule predictions). Reported: each seed's
before / after / best rule and its own paired interval; the mean and standard deviation of *after* over the
seeds; and the seed-averaged verdict: per item, the mean of the seeds' after-scores minus the better of
before and the best rule (chosen on these items, as each seed's verdict does), with its paired bootstrap 95%
interval (10,000 resamples). A gain counts only when that interval excludes 0 upwards.

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


def load(run: Path) -> tuple[dict[str, Any], dict[str, dict[str, dict[str, Any]]]]:
    """A run's result and its predictions as ``{system: {item id: row}}``."""
    result = json.loads((run / "learning.json").read_text())
    preds: dict[str, dict[str, dict[str, Any]]] = {}
    for n, line in enumerate((run / "predictions.jsonl").read_text().splitlines(), 1):
        try:
            row = json.loads(line)
            preds.setdefault(row["system"], {})[row["id"]] = row
        except (json.JSONDecodeError, KeyError) as e:
            raise SystemExit(f"{run / 'predictions.jsonl'}: line {n}: not a prediction row ({e})") from None
    return result, preds


def summarize(runs: list[Path]) -> dict[str, Any]:
    from learning_report import mean, paired

    loaded = [load(r) for r in runs]
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
    rules = [s for s in fixed if s not in ("before", "after SFT")]
    before = [first_preds["before"][i] for i in ids]
    best_rule = max(rules, key=lambda s: mean([first_preds[s][i] for i in ids], key))
    rule_rows = [first_preds[best_rule][i] for i in ids]
    ref_name, ref = (
        ("before", before) if mean(before, key) >= mean(rule_rows, key) else (best_rule, rule_rows)
    )
    avg_after = [{key: statistics.fmean(p["after"][i][key] for _, p in loaded)} for i in ids]
    afters = [res["after"] for res, _ in loaded]
    gain = paired(ref, avg_after, key)
    return {
        "task": first["task"], "metric": key, "metric_label": first.get("metric_label"), "n_eval": len(ids),
        "seeds": [res["seed"] for res, _ in loaded], "runs": [str(r) for r in runs],
        "per_seed": [{k: res[k] for k in ("seed", "before", "after", "best_trivial", "gain_ci_low", "gain_ci_high",
                                          "gain", "wall_time_s")} for res, _ in loaded],  # fmt: skip
        "before": round(mean(before, key), 2), "after_mean": round(statistics.fmean(afters), 2),
        "after_sd": round(statistics.stdev(afters), 2) if len(afters) > 1 else 0.0,
        "best_trivial": round(mean(rule_rows, key), 2), "best_trivial_rule": best_rule,
        "gain_reference": ref_name, "gain_diff": gain["diff"], "gain_ci_low": gain["ci"][0],
        "gain_ci_high": gain["ci"][1], "gain": gain["ci"][0] > 0,
        "after_vs_before": paired(before, avg_after, key),
    }  # fmt: skip


def markdown(s: dict[str, Any]) -> str:
    lines = [f"`{s['task']}`, {len(s['seeds'])} seeds, {s['n_eval']} held-out items, {s['metric_label']}", "",
             "| seed | before | after | best rule | after minus the better of before and the best rule (95% CI) | wall time (s) |",
             "|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in s["per_seed"]:
        lines.append(f"| {r['seed']} | {r['before']:.2f} | {r['after']:.2f} | {r['best_trivial']:.2f} | "
                     f"{r['gain_ci_low']:+.2f}..{r['gain_ci_high']:+.2f} | {r['wall_time_s']:.0f} |")  # fmt: skip
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
    args = ap.parse_args(argv)
    s = summarize(args.runs)
    out = args.out or args.runs[0].parent / f"seeds-{s['task']}.md"
    out.write_text(markdown(s))
    print(markdown(s))
    print(json.dumps(s))
    return s


if __name__ == "__main__":
    main()
