"""``memrl train grpo`` on each task (read, answer, update, build) with the offline SmolLM2-135M-Instruct,
killed mid-run with SIGKILL and resumed with ``--resume``.

    flock /work/cpu.lock .venv/bin/python -m bench.research.train_tasks_offline --out runs/offline-tasks

For each task: a real LoCoMo conversation of the train split (``--conv-id``, default conv-41), a few of its
questions, small groups and short replies. The first run (``--steps N``) is killed with SIGKILL as soon as
its checkpoint holds step 1 (so during step 2); ``--resume`` then runs it to N. Checked per task: the
resumed run exits 0, ``metrics.jsonl`` has steps 1..N exactly once, the rollouts of steps kept from the
killed run are unchanged, every step has its rollouts once, and the checkpoint holds N steps. Prints a
markdown table, then one JSON object (last line).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

AGENT = {
    "read": ["--agent-option", "chunk_tokens=4000", "--agent-option", "memory_tokens=32",
             "--agent-option", "answer_tokens=16"],
    "answer": ["--top-k", "5", "--max-answer-tokens", "16"],
    "update": ["--agent-option", "max_tokens=64", "--agent-option", "max_tool_calls=2",
               "--agent-option", "max_turns=3"],
    "build": ["--agent-option", "max_operations=1", "--agent-option", "max_item_chars=200"],
}  # fmt: skip


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def _steps_done(out: Path) -> int:
    from memrl.train.trainer import checkpoint_folder

    found = checkpoint_folder(out / "checkpoint")
    if found is None or not (found / "trainer_state.pt").exists():
        return 0
    try:
        return int(torch.load(found / "trainer_state.pt", weights_only=False)["steps_done"])
    except Exception:  # noqa: BLE001 - a checkpoint being renamed into place: read it on the next poll
        return 0


def run_task(task: str, args: argparse.Namespace) -> dict:
    out = args.out / task
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "memrl.cli.main", "train", "grpo", "--task", task, "--dataset", "locomo",
           "--data-path", args.data_path, "--conv-id", args.conv_id, "--questions", str(args.questions), "--group-size", str(args.group_size),
           "--tasks-per-step", "1", "--steps", str(args.steps), "--lr", "1e-5", "--no-dynamic-sampling",
           "--threads", "2", "--output-dir", str(out), "--json", *AGENT[task]]  # fmt: skip
    log = (args.out / f"{task}.log").open("w")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    while proc.poll() is None and _steps_done(out) < 1:
        time.sleep(0.5)
    killed = proc.poll() is None
    if killed:
        proc.send_signal(signal.SIGKILL)
    proc.wait()
    first_s = time.perf_counter() - t0
    done_at_kill = _steps_done(out)
    kept = [r for r in _rows(out / "rollouts.jsonl") if r["step"] <= done_at_kill]
    t1 = time.perf_counter()
    rc = subprocess.run([*cmd, "--resume"], stdout=log, stderr=subprocess.STDOUT).returncode
    resume_s = time.perf_counter() - t1
    metrics, rollouts = _rows(out / "metrics.jsonl"), _rows(out / "rollouts.jsonl")
    steps = [int(m["step"]) for m in metrics]
    per_step = {s: sum(1 for r in rollouts if r["step"] == s) for s in steps}
    checks = {
        "killed_mid_run": killed and 1 <= done_at_kill < args.steps,
        "resume_exit_0": rc == 0,
        "steps_once": steps == list(range(1, args.steps + 1)),
        "kept_rollouts_unchanged": [r for r in rollouts if r["step"] <= done_at_kill] == kept,
        "rollouts_every_step_once": all(n > 0 for n in per_step.values())
        and len(rollouts) == sum(per_step.values())
        and [r["step"] for r in rollouts] == sorted(r["step"] for r in rollouts),
        "checkpoint_steps": _steps_done(out) == args.steps,
        "trajectories_recorded": all(r.get("steps") for r in rollouts),
    }
    return {
        "task": task, "ok": all(checks.values()), "checks": checks, "killed_after_steps": done_at_kill,
        "first_run_s": round(first_s, 1), "resume_s": round(resume_s, 1),
        "step_s": [m.get("seconds") for m in metrics], "reward_mean": [round(m["reward_mean"], 4) for m in metrics],
        "rollouts_per_step": list(per_step.values()), "failed": sum(int(m.get("failed", 0)) for m in metrics),
        "rollout_logprob_diff_max": max((m.get("rollout_logprob_diff", 0.0) for m in metrics), default=None),
    }  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/offline-tasks"))
    ap.add_argument("--tasks", default="read,answer,update,build")
    ap.add_argument("--data-path", default="/work/shared/data", help="the folder that holds LoCoMo")
    ap.add_argument("--conv-id", default="conv-41", help="a LoCoMo train-split conversation")
    ap.add_argument("--questions", type=int, default=3)
    ap.add_argument("--group-size", type=int, default=2)
    ap.add_argument("--steps", type=int, default=2, help="steps per task (killed during step 2, resumed)")
    args = ap.parse_args()
    if args.steps < 2:
        ap.error("--steps must be >= 2 (the run is killed after step 1)")
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    results = []
    for task in args.tasks.split(","):
        results.append(run_task(task, args))
        print(json.dumps(results[-1]), file=sys.stderr)
    print(
        "| task | killed after step | first run (s) | resume (s) | s/step | reward mean per step | checks |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['task']} | {r['killed_after_steps']} | {r['first_run_s']} | {r['resume_s']} | "
              f"{', '.join(str(s) for s in r['step_s'])} | {', '.join(str(x) for x in r['reward_mean'])} | "
              f"{'pass' if r['ok'] else 'FAIL: ' + ', '.join(k for k, v in r['checks'].items() if not v)} |")  # fmt: skip
    print(json.dumps({"model": "SmolLM2-135M-Instruct", "conv_id": args.conv_id, "steps": args.steps,
                      "group_size": args.group_size, "all_ok": all(r["ok"] for r in results),
                      "wall_time_s": round(time.perf_counter() - t0, 1), "tasks": results}))  # fmt: skip
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
