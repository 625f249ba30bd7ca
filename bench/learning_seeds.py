"""Several seeds of ``bench/learning.py``, together: the figure the README states.

    .venv/bin/python -m bench.learning_seeds runs/learning-read-s0 runs/learning-read-s1 runs/learning-read-s2

Each folder is one seed's run (``learning.json`` and ``predictions.jsonl``), all of one task on the same
held-out items (checked: same item ids, same untrained and rule predictions). Reported: each seed's
before / after / best rule and its own paired interval; the mean and standard deviation of *after* over the
seeds; and the seed-averaged verdict: per item, the mean of the seeds' after-scores minus the better of
before and the best rule (chosen on these items, as each seed's verdict does), with its paired bootstrap 95%
interval (10,000 resamples). A gain counts only when that interval excludes 0 upwards.

``--control DIR ...`` pairs each seed with its equal-time SFT-only control (a ``--steps 0 --sft-minutes M``
run of the same seed, M the seed's SFT + GRPO minutes; one folder per seed, in the runs' order): each seed's
and the seed-averaged *SFT + GRPO minus SFT alone*, paired on the items, and both arms' training minutes.

``--rules PREDICTIONS.jsonl`` adds the rules of a ``python -m bench.learning --baselines-only`` run on the same
items to runs made before those rules existed (a rule a run already has must predict the same there).

Writes OUT (default: beside the first run, ``seeds.md``); last line of stdout: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any


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


def summarize(
    runs: list[Path], rules_file: Path | None = None, controls: list[Path] | None = None
) -> dict[str, Any]:
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
        _same_fixed(run, preds, runs[0], first_preds, fixed, ids)
    from bench.learning_report import paired, verdict
    from memrl.eval.protocol import cluster_of

    clusters = [cluster_of(i) for i in ids]  # items of one conversation or document are resampled together
    rows = {s: [first_preds[s][i] for i in ids] for s in fixed if s != "after SFT"}
    before = rows.pop("before")
    avg_after = _seed_mean(loaded, "after", ids, key)
    afters = [res["after"] for res, _ in loaded]
    v = verdict(
        before, avg_after, rows, key, clusters
    )  # the same reference as each seed's (it does not depend on after)
    out = {
        "task": first["task"], "metric": key, "metric_label": first.get("metric_label"), "n_eval": len(ids),
        "n_clusters": len(set(clusters)), "seeds": [res["seed"] for res, _ in loaded], "runs": [str(r) for r in runs],
        "per_seed": [per_seed(res, p, ids, key, verdict(before, [p["after"][i] for i in ids], rows, key, clusters),
                              clusters) for res, p in loaded],
        "before": v["before"], "after_mean": round(statistics.fmean(afters), 2),
        "after_sd": round(statistics.stdev(afters), 2) if len(afters) > 1 else 0.0,
        **{k: v[k] for k in ("best_trivial", "best_trivial_rule", "trivial", "gain_reference", "gain_ci_low",
                             "gain_ci_high", "gain", "after_vs_before")},
        "gain_diff": _diff(v),
    }  # fmt: skip
    has_sft = ["after SFT" in p for _, p in loaded]
    if any(has_sft) and not all(has_sft):
        raise SystemExit("some runs scored an SFT-only checkpoint and some did not: not the same setting")
    if all(has_sft):  # RL's own effect: the same items after GRPO against after SFT alone, seed-averaged
        avg_sft = _seed_mean(loaded, "after SFT", ids, key)
        sfts = [r["after_sft"] for r in out["per_seed"]]  # each seed's SFT score, as its row has it
        out["after_sft_mean"] = round(statistics.fmean(sfts), 2)
        out["after_sft_sd"] = round(statistics.stdev(sfts), 2) if len(sfts) > 1 else 0.0
        out["rl_over_sft"] = paired(avg_sft, avg_after, key, clusters)
        out["sft_over_before"] = paired(before, avg_sft, key, clusters)
        out["sft_vs_best_trivial"] = paired(rows[v["best_trivial_rule"]], avg_sft, key, clusters)
    if controls:
        out["control"] = control_summary(runs, loaded, controls, ids, fixed, key, clusters)
    return out


def _same_fixed(run: Path, preds: dict, ref: Path, ref_preds: dict, fixed: list[str], ids: list[str]) -> None:
    """Refuse ``run`` unless its untrained and rule predictions are ``ref``'s (the SFT model's may differ)."""
    for s in fixed:
        if s != "after SFT" and [preds[s][i]["prediction"] for i in ids] != [ref_preds[s][i]["prediction"] for i in ids]:  # fmt: skip
            raise SystemExit(f"{run}: its '{s}' predictions differ from {ref}'s: not the same setting")


def _train_minutes(res: dict[str, Any]) -> float:
    return round((res.get("sft_s", 0.0) + res.get("train_s", 0.0)) / 60, 2)


def control_summary(runs: list[Path], loaded: list, controls: list[Path], ids: list[str], fixed: list[str],
                    key: str, clusters: list[str]) -> dict[str, Any]:  # fmt: skip
    """Each seed's run against its SFT-only control (module docstring): checked to be a ``--steps 0`` run of
    the same task, seed and items with the same untrained and rule predictions."""
    from bench.learning_report import paired

    if len(controls) != len(runs):
        raise SystemExit(f"--control: {len(controls)} folders for {len(runs)} runs (one per seed, in order)")
    per, ctl_loaded = [], []
    for run, (res, preds), ctl in zip(runs, loaded, controls, strict=True):
        cres, cpreds = load(ctl)
        if cres["task"] != res["task"] or cres["seed"] != res["seed"] or list(cpreds["after"]) != ids:
            raise SystemExit(f"{ctl}: not the task, seed and held-out items of {run}")
        if (cres.get("train") or {}).get("steps") != 0:
            raise SystemExit(f"{ctl}: made GRPO steps: not an SFT-only (--steps 0) control")
        _same_fixed(ctl, cpreds, run, preds, fixed, ids)
        ctl_loaded.append((cres, cpreds))
        per.append({"seed": res["seed"], "control": str(ctl), "control_after": cres["after"],
                    "control_minutes": _train_minutes(cres), "after": res["after"], "minutes": _train_minutes(res),
                    "control_sft_steps": (cres.get("sft") or {}).get("steps"),
                    "rl_over_control": paired([cpreds["after"][i] for i in ids], [preds["after"][i] for i in ids],
                                              key, clusters)})  # fmt: skip
    ctl_after = [r["control_after"] for r in per]
    return {"per_seed": per, "after_mean": round(statistics.fmean(ctl_after), 2),
            "after_sd": round(statistics.stdev(ctl_after), 2) if len(ctl_after) > 1 else 0.0,
            "rl_over_control": paired(_seed_mean(ctl_loaded, "after", ids, key), _seed_mean(loaded, "after", ids, key),
                                      key, clusters)}  # fmt: skip


def _seed_mean(loaded: list, system: str, ids: list[str], key: str) -> list[dict[str, float]]:
    """Per item, the mean over the seeds of ``system``'s score."""
    return [{key: statistics.fmean(p[system][i][key] for _, p in loaded)} for i in ids]


def _diff(v: dict[str, Any]) -> float:
    """After minus the better of before and the best rule (the paired mean difference)."""
    return v["after_vs_before" if v["gain_reference"] == "before" else "after_vs_best_trivial"]["diff"]


def per_seed(res: dict[str, Any], preds: dict[str, dict[str, dict[str, Any]]], ids: list[str], key: str,
             v: dict[str, Any], clusters: list[str]) -> dict:  # fmt: skip
    """One seed's after and its verdict against the rules of all seeds (the same rule set); with an SFT
    stage, its SFT-only score and GRPO's paired difference over it; GRPO's steps and its groups with reward
    variance per step (a step whose groups all tie teaches nothing)."""
    row = {"seed": res["seed"], "after": res["after"], "diff": _diff(v), "gain_ci_low": v["gain_ci_low"],
           "gain_ci_high": v["gain_ci_high"], "gain": v["gain"], "wall_time_s": res["wall_time_s"]}  # fmt: skip
    train = res.get("train") or {}
    row["steps"] = train.get("steps")
    row["groups_with_signal_per_step"] = train.get("groups_with_signal_per_step")
    if "after SFT" in preds:
        from bench.learning_report import mean, paired

        sft = [preds["after SFT"][i] for i in ids]
        row["after_sft"] = round(mean(sft, key), 2)
        row["rl_over_sft"] = paired(sft, [preds["after"][i] for i in ids], key, clusters)
    return row


def _ci(p: dict[str, Any]) -> str:
    return f"{p['diff']:+.2f} ({p['ci'][0]:+.2f}..{p['ci'][1]:+.2f})"


def markdown(s: dict[str, Any]) -> str:
    sft = "rl_over_sft" in s
    lines = [f"`{s['task']}`, {len(s['seeds'])} seeds, {s['n_eval']} held-out items in {s['n_clusters']} "
             f"clusters (intervals: cluster bootstrap), {s['metric_label']}", "",
             "| seed | untrained |" + (" SFT |" if sft else "") + (" SFT + GRPO |" if sft else " after |")
             + " best rule |" + (" GRPO minus SFT (95% CI) |" if sft else "")
             + " after minus the better of untrained and the best rule (95% CI) | GRPO steps | groups with reward"
             " variance / step | wall time (s) |",
             "|---:|---:|" + ("---:|" if sft else "") + "---:|---:|" + ("---:|" if sft else "") + "---:|---:|---:|---:|"]  # fmt: skip
    for r in s["per_seed"]:
        steps = "-" if r.get("steps") is None else str(r["steps"])
        sig = (
            "-" if r.get("groups_with_signal_per_step") is None else f"{r['groups_with_signal_per_step']:.2f}"
        )
        lines.append(f"| {r['seed']} | {s['before']:.2f} |" + (f" {r['after_sft']:.2f} |" if sft else "")
                     + f" {r['after']:.2f} | {s['best_trivial']:.2f} |" + (f" {_ci(r['rl_over_sft'])} |" if sft else "")
                     + f" {r['diff']:+.2f} ({r['gain_ci_low']:+.2f}..{r['gain_ci_high']:+.2f}) | {steps} | {sig} |"
                     f" {r['wall_time_s']:.0f} |")  # fmt: skip
    lines.append(
        f"| mean | {s['before']:.2f} |" + (f" {s['after_sft_mean']:.2f} ± {s['after_sft_sd']:.2f} |" if sft else "")
        + f" {s['after_mean']:.2f} ± {s['after_sd']:.2f} | {s['best_trivial']:.2f} ({s['best_trivial_rule']}) |"
        + (f" {_ci(s['rl_over_sft'])}, seed-averaged |" if sft else "")
        + f" {s['gain_diff']:+.2f} ({s['gain_ci_low']:+.2f}..{s['gain_ci_high']:+.2f}), seed-averaged | | | |"
    )  # fmt: skip
    if sft:
        lines += ["", f"SFT alone over the untrained model, seed-averaged: {_ci(s['sft_over_before'])}; "
                      f"SFT alone against the best rule: {_ci(s['sft_vs_best_trivial'])}."]  # fmt: skip
    if "control" in s:
        c = s["control"]
        lines += ["", "| seed | SFT alone, minutes (steps) | SFT alone | SFT + GRPO, minutes | SFT + GRPO |"
                      " SFT + GRPO minus SFT alone (95% CI) |", "|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for r in c["per_seed"]:
            lines.append(f"| {r['seed']} | {r['control_minutes']:.1f} ({r['control_sft_steps']}) | {r['control_after']:.2f} |"
                         f" {r['minutes']:.1f} | {r['after']:.2f} | {_ci(r['rl_over_control'])} |")  # fmt: skip
        lines.append(f"| mean | | {c['after_mean']:.2f} ± {c['after_sd']:.2f} | | {s['after_mean']:.2f} ± {s['after_sd']:.2f} |"
                     f" {_ci(c['rl_over_control'])}, seed-averaged |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="one learning.py output folder per seed")
    ap.add_argument("--out", type=Path, help="markdown file (default: RUNS[0]/../seeds-TASK.md)")
    ap.add_argument(
        "--rules", type=Path, help="predictions of --baselines-only on the same items (rules to add)"
    )
    ap.add_argument("--control", type=Path, nargs="+",
                    help="the SFT-only (--steps 0) control of each run, one folder per seed in the runs' order")  # fmt: skip
    args = ap.parse_args(argv)
    s = summarize(args.runs, args.rules, args.control)
    out = args.out or args.runs[0].parent / f"seeds-{s['task']}.md"
    out.write_text(markdown(s))
    print(markdown(s))
    print(json.dumps(s))
    return s


if __name__ == "__main__":
    main()
