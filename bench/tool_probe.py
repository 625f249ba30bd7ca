"""Measure before training: the untrained model's reward distribution on ``update`` or ``build``.

The learning benchmark's own task sets and agent settings (:mod:`bench.learning_tools`: MemUpdate with 4 tool
calls of 128 tokens, MemBuilder with 2 operations of 120 characters) on ``--groups`` TRAIN items drawn
with ``--seed``, ``--group-size`` rollouts each at ``--temperature``: groups with any reward variance (the
only groups GRPO learns from; a ``build`` session gives one group per memory type), mean reward, rollouts
with a non-zero reward, tool calls (``update``) or proposed and applied operations (``build``) per
rollout, seconds and tokens per rollout. Then one GRPO update (LoRA 16, every group kept, as a step of
``--tasks-per-step`` items would) on the first groups, timed: with the rollout time of as many groups, that
is the time of one training step.

    .venv/bin/python -m bench.tool_probe --task update --tool-choice required --groups 10 --group-size 4
    .venv/bin/python -m bench.tool_probe --task build --groups 4 --group-size 4

Last line of stdout: one JSON object (also written to ``--out``), with every rollout's reward.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", required=True, choices=["update", "build"])
    ap.add_argument("--groups", type=int, default=10, help="TRAIN items (build: sessions, 4 groups each)")
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--tool-choice", default="auto", choices=["auto", "required"], help="update only")
    ap.add_argument("--tasks-per-step", type=int, default=2, help="items per timed GRPO update")
    ap.add_argument("--seed", type=int, default=0, help="which train items")
    ap.add_argument("--minutes", type=float, default=8.0,
                    help="stop drawing items after the one that ends past this many minutes of rollouts")  # fmt: skip
    ap.add_argument(
        "--micro-batch", type=int, default=8, help="the timed update's sequences per forward pass"
    )
    ap.add_argument(
        "--micro-tokens", type=int, default=8192, help="the timed update's tokens per forward pass"
    )
    ap.add_argument("--model", help="HF folder (default: the offline SmolLM2-135M-Instruct)")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    args = ap.parse_args(argv)
    if (
        args.groups < 1
        or args.group_size < 2
        or args.tasks_per_step < 1
        or min(args.micro_batch, args.micro_tokens) < 1
    ):
        ap.error(
            "--groups, --tasks-per-step, --micro-batch and --micro-tokens must be >= 1, --group-size >= 2 "
            "(one rollout has no variance)"
        )
    if args.task == "build" and args.tool_choice != "auto":
        ap.error("--tool-choice is an update option (MemBuilder writes JSON actions, not tool calls)")
    args.eval_items = 0  # learning_tools' set builders read it (the held-out sample, unused here)
    return args


def rollout_row(task: str, t) -> dict:
    """One rollout's figures: reward, tokens, and the calls it made."""
    row = {"reward": t.reward, "failure": t.failure, "prompt_tokens": t.prompt_tokens,
           "completion_tokens": t.completion_tokens, "llm_calls": len(t.steps)}  # fmt: skip
    if task == "update":
        row.update(tool_calls=t.metrics.get("tool_calls", 0.0), valid_calls=t.metrics.get("valid_calls", 0.0),
                   calls={k[6:]: v for k, v in t.metrics.items() if k.startswith("calls/")})  # fmt: skip
    else:
        row.update(memory_type=t.info.get("memory_type"), parsed=t.metrics.get("parsed"),
                   proposed=t.metrics.get("proposed", 0), applied=t.metrics.get("applied", 0))  # fmt: skip
    return row


def summarize(task: str, groups: list[list[dict]]) -> dict:
    """Groups with reward variance, mean reward and the per-rollout means (failed rollouts excluded)."""
    rows = [r for g in groups for r in g]
    ok = [r for r in rows if r["reward"] is not None]
    if not ok:
        raise SystemExit(f"every rollout failed: {rows[0]['failure']}")
    mean = lambda k: round(statistics.mean(r[k] for r in ok), 3)  # noqa: E731
    out = {
        "groups": len(groups), "rollouts": len(rows), "failed_rollouts": len(rows) - len(ok),
        "groups_with_variance": sum(len({r["reward"] for r in g if r["reward"] is not None}) > 1 for g in groups),
        "mean_reward": round(statistics.mean(r["reward"] for r in ok), 5),
        "rollouts_reward_nonzero": sum(r["reward"] != 0 for r in ok),
        "prompt_tokens_per_rollout": mean("prompt_tokens"), "completion_tokens_per_rollout": mean("completion_tokens"),
        "llm_calls_per_rollout": mean("llm_calls"),
    }  # fmt: skip
    if task == "update":
        out.update(tool_calls_per_rollout=mean("tool_calls"), valid_calls_per_rollout=mean("valid_calls"),
                   rollouts_with_a_call=sum(r["tool_calls"] > 0 for r in ok))  # fmt: skip
    else:
        out.update(parsed_share=round(sum(bool(r["parsed"]) for r in ok) / len(ok), 3),
                   proposed_per_rollout=mean("proposed"), applied_per_rollout=mean("applied"))  # fmt: skip
    return out


def peak_rss_gib() -> float:
    """This process's peak resident memory so far (Linux reports KiB)."""
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)


def write(path: Path | None, result: dict, per_item: list[dict]) -> None:
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**result, "items": per_item}, indent=1) + "\n")


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("MEMRL_DATA_DIR", str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from bench.learning_tools import _build_sets, _update_sets
    from memrl.llm.local import LocalLLM
    from memrl.train.trainer import PolicyTrainer, TrainerConfig

    train_set, _, _ = (_update_sets if args.task == "update" else _build_sets)(args)
    picks = random.Random(f"probe-{args.task}-{args.seed}").sample(
        range(len(train_set)), min(args.groups, len(train_set))
    )
    llm = LocalLLM(args.model, max_batch_size=16).load()
    per_item: list[dict] = []

    async def roll() -> list[list]:
        await train_set.setup()
        try:
            kept = []
            start = time.perf_counter()
            for i in picks:  # one item at a time: its seconds are its own
                if kept and time.perf_counter() - start > 60 * args.minutes:
                    print(f"--minutes {args.minutes} reached after {len(kept)} items", flush=True)
                    break
                t0 = time.perf_counter()
                gs = await train_set.group(llm, i, args.group_size, args.temperature)
                seconds = time.perf_counter() - t0
                per_item.append({"item": i, "seconds": round(seconds, 1),
                                 "groups": [[rollout_row(args.task, t) for t in g] for g in gs]})  # fmt: skip
                print(json.dumps({"item": i, "seconds": round(seconds, 1),
                                  "rewards": [[t.reward for t in g] for g in gs]}), flush=True)  # fmt: skip
                kept.append(gs)
            return kept
        finally:
            await train_set.close()
            await llm.aclose()

    t0 = time.perf_counter()
    trajs = asyncio.run(roll())
    rollout_s = sum(item["seconds"] for item in per_item)  # without setup (the memory before the items)
    setup_s = time.perf_counter() - t0 - rollout_s
    groups = [g for item in per_item for g in item["groups"]]
    result = {
        "task": args.task,
        "command": "python -m bench.tool_probe " + " ".join(sys.argv[1:] if argv is None else argv),
        "train_items": len(per_item),
        "group_size": args.group_size,
        "temperature": args.temperature,
        **({"tool_choice": args.tool_choice} if args.task == "update" else {}),
        **summarize(args.task, groups),
        "setup_s": round(setup_s, 1),
        "s_per_item": round(rollout_s / len(per_item), 1),
        "s_per_rollout": round(rollout_s / (len(per_item) * args.group_size), 2),
    }  # fmt: skip (build: a session)
    result["peak_rss_gib_rollouts"] = peak_rss_gib()
    write(args.out, result, per_item)  # kept if the update below runs out of memory
    trainer = PolicyTrainer(llm, TrainerConfig(lr=2e-4, lora_rank=16, dynamic_sampling=False,
                                               micro_batch=args.micro_batch, micro_tokens=args.micro_tokens))  # fmt: skip
    step_groups = [[t for t in g if t.reward is not None] for gs in trajs[: args.tasks_per_step] for g in gs]
    t1 = time.perf_counter()
    m = trainer.step(step_groups)
    update_s = time.perf_counter() - t1
    result["update"] = {"items": min(args.tasks_per_step, len(trajs)), "seconds": round(update_s, 1),
                        "micro_batch": args.micro_batch, "micro_tokens": args.micro_tokens,
                        "samples": m.get("samples"), "completion_tokens": m.get("n_tokens")}  # fmt: skip
    result["step_s_estimate"] = round(result["s_per_item"] * args.tasks_per_step + update_s, 1)
    result["peak_rss_gib"] = peak_rss_gib()
    write(args.out, result, per_item)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
