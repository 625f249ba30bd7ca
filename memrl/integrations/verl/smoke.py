"""The per-task summary of a smoke run (what ``scripts/verl_smoke.sh`` prints at the end), from the run's files.

For each task the script leaves, in its output folder, ``TASK.log`` (verl's console log), ``TASK.rc`` (the
launch's exit status) and ``rollouts-TASK/STEP.jsonl`` (verl's ``trainer.rollout_data_dir`` dump: one line
per output with ``score`` and ``uid`` = ``{prompt}_{rollout}_{output}``). Read from them:

* steps and the mean reward: verl's console logger writes ``step:N - key:value - ...`` per step
  (``verl.utils.logger.aggregate_logger.concat_dict_to_str``); ``critic/score/mean`` is the batch's mean
  reward (``verl.trainer.ppo.metric_utils.compute_data_metrics``);
* groups with variance: per step and prompt, the rollouts' episode rewards (the score of each rollout's last
  output) are not all equal: only those groups carry a GRPO advantage;
* failed rollouts: verl's v1 worker logs ``Error in _run_prompt`` once per failed rollout of a prompt
  (``verl/trainer/ppo/v1/agent_loop_tq.py``), memrl's loops raise ``RolloutFailed`` (or the provider error).

A task *failed* when its launch exited non-zero or it logged fewer training steps than asked for.

    python -m memrl.integrations.verl.smoke OUT_DIR read update build [--steps 3]     # exit 1 if any failed
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

KEY = "critic/score/mean"
_STEP = re.compile(r"(?:^|\s)step:(\d+) - ")
_VALUE = re.compile(r"(?:^| - )" + re.escape(KEY) + r":(\S+)")
FAILED_ROLLOUT = "Error in _run_prompt"


def reward_means(lines: Iterable[str]) -> dict[int, float]:
    """Step -> mean reward of that step's batch, from verl console log lines."""
    out: dict[int, float] = {}
    for line in lines:
        step, value = _STEP.search(line), _VALUE.search(line)
        if step and value:
            out[int(step.group(1))] = float(value.group(1))
    return out


def group_variance(rows: Iterable[dict]) -> tuple[int, int]:
    """(groups, groups whose rollouts' rewards differ) from verl's rollout dump rows."""
    episodes: dict[tuple, dict[str, tuple[int, float]]] = defaultdict(dict)
    for row in rows:
        prompt, rollout, output = (str(row["uid"]).rsplit("_", 2) + ["0", "0"])[:3]
        key, last = (row.get("step"), prompt), episodes[(row.get("step"), prompt)].get(rollout)
        if last is None or int(output) >= last[0]:  # an episode's reward: the score of its last output
            episodes[key][rollout] = (int(output), float(row["score"]))
    varied = sum(1 for rollouts in episodes.values() if len({s for _, s in rollouts.values()}) > 1)
    return len(episodes), varied


@dataclass
class TaskRun:
    name: str
    rc: int | None  # None: the launch never recorded an exit status
    means: dict[int, float]
    groups: int
    varied: int
    failures: int
    last_error: str | None

    def failed(self, steps: int) -> bool:
        return self.rc != 0 or len(self.means) < steps

    def line(self, steps: int) -> str:
        status = "FAILED" if self.failed(steps) else "ok"
        mean = f"{sum(self.means.values()) / len(self.means):.3f}" if self.means else "n/a"
        per_step = ", ".join(f"{v:.3f}" for _, v in sorted(self.means.items()))
        out = (f"{self.name}: {status} | steps {len(self.means)}/{steps} | mean reward {mean}"
               f"{f' ({per_step})' if per_step else ''} | groups with variance {self.varied}/{self.groups} | "
               f"failed rollouts {self.failures} | exit {self.rc if self.rc is not None else 'unknown'}")  # fmt: skip
        if self.failed(steps):
            why = (
                "no training step logged" if not self.means else f"{len(self.means)} of {steps} steps logged"
            )
            out += f"\n  {why}; last error: {self.last_error or 'none in the log'}"
        return out


def read_task(out: Path, name: str) -> TaskRun:
    """A task's run from the smoke folder (see the module docstring); missing files read as nothing."""
    log = out / f"{name}.log"
    lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
    rc_file = out / f"{name}.rc"
    rc = int(rc_file.read_text().strip()) if rc_file.is_file() and rc_file.read_text().strip() else None
    rows = []
    for path in sorted((out / f"rollouts-{name}").glob("*.jsonl")):
        rows += [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    groups, varied = group_variance(rows)
    errors = [x.strip() for x in lines if re.search(r"(Error|Exception)\b.*:", x) and "Traceback" not in x]
    return TaskRun(name, rc, reward_means(lines), groups, varied,
                   sum(FAILED_ROLLOUT in x for x in lines), errors[-1][:300] if errors else None)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m memrl.integrations.verl.smoke", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("out", type=Path, help="the smoke run's folder")
    ap.add_argument("tasks", nargs="+")
    ap.add_argument("--steps", type=int, default=1, help="training steps each task should have logged")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    runs = [read_task(args.out, t) for t in args.tasks]
    print(f"== summary ({args.out})")
    for run in runs:
        print(run.line(args.steps))
    failed = [r.name for r in runs if r.failed(args.steps)]
    if failed:
        print(f"FAILED: {', '.join(failed)} (logs: {args.out}/TASK.log)")
        return 1
    print("all tasks ran; what the rewards mean: docs/verl.md, The smoke run")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
