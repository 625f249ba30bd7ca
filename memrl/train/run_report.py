"""The end of a training run: ``report.md`` (a table of the steps) and ``reward.png`` (reward, KL to the
starting policy and held-out score per step), both drawn from the whole ``metrics.jsonl`` so that a resumed
run's picture covers its earlier steps too.

    write_report(Path("runs/x"), rows)      # rows: metrics.jsonl's, one dict per step

matplotlib is imported here only, with the Agg back-end (no display needed).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

__all__ = ["REPORT_COLUMNS", "plot_run", "write_report"]

#: The columns of report.md's table (a row without a value shows "-").
REPORT_COLUMNS = (
    "step", "reward_mean", "reward_std", "groups_with_variance", "samples", "kl_to_start", "ratio_max",
    "clip_frac", "answer_tokens_mean", "heldout_reward", "pg_loss", "grad_norm", "seconds",
)  # fmt: skip


def _num(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else math.nan


def _series(rows: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    """The steps where ``key`` has a finite value, and those values."""
    pts = [(_num(r.get("step")), _num(r.get(key))) for r in rows]
    pts = [(s, v) for s, v in pts if math.isfinite(v)]
    return [s for s, _ in pts], [v for _, v in pts]


def plot_run(path: Path, rows: list[dict[str, Any]]) -> None:
    """Three panels sharing the step axis: mean reward with its spread (``reward_std``), ``kl_to_start``,
    and the held-out score (``heldout_reward``; the score before training at step 0)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (rw, kl, ho) = plt.subplots(3, 1, figsize=(6.4, 7.2), sharex=True)
    steps, mean = _series(rows, "reward_mean")
    std = [_num(r.get("reward_std")) for r in rows if math.isfinite(_num(r.get("reward_mean")))]
    rw.plot(steps, mean, marker="o", label="mean")
    if any(math.isfinite(s) for s in std):
        lo = [m - s if math.isfinite(s) else m for m, s in zip(mean, std, strict=True)]
        hi = [m + s if math.isfinite(s) else m for m, s in zip(mean, std, strict=True)]
        rw.fill_between(steps, lo, hi, alpha=0.2, label="± std")
        rw.legend(loc="best", fontsize=8)
    rw.set_ylabel("rollout reward")
    if all(0 <= m <= 1 for m in mean):  # a 0..1 reward on its full scale; others (ADRPO, deltas) as they fall
        rw.set_ylim(-0.05, 1.05)
    steps, kls = _series(rows, "kl_to_start")
    if steps:
        kl.plot(steps, kls, marker="o", color="tab:red")
    else:
        kl.text(0.5, 0.5, "not measured (measure_kl off, or no update)", ha="center", transform=kl.transAxes)
    kl.set_ylabel("KL to start")
    steps, held = _series(rows, "heldout_reward")
    if rows and math.isfinite(_num(rows[0].get("heldout_reward_at_start"))):
        steps, held = [0.0, *steps], [_num(rows[0]["heldout_reward_at_start"]), *held]
    if steps:
        ho.plot(steps, held, marker="s", color="tab:green")
    else:
        ho.text(0.5, 0.5, "no held-out evaluation (eval_every)", ha="center", transform=ho.transAxes)
    ho.set_ylabel("held-out reward")
    ho.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _cell(value: Any) -> str:
    v = _num(value)
    return "-" if not math.isfinite(v) else f"{v:.4g}"


def write_report(out: Path, rows: list[dict[str, Any]]) -> None:
    """``out/report.md`` (one table row per step) and ``out/reward.png`` (:func:`plot_run`)."""
    cols = REPORT_COLUMNS
    lines = ["# Training run", "", f"{len(rows)} steps; metrics per step in `metrics.jsonl`.", ""]
    if rows and math.isfinite(_num(rows[0].get("heldout_reward_at_start"))):
        lines += [f"Held-out reward before training: {_cell(rows[0]['heldout_reward_at_start'])}.", ""]
    lines += ["| " + " | ".join(cols) + " |", "|" + "---:|" * len(cols)]
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in cols) + " |" for r in rows]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    plot_run(out / "reward.png", rows)
