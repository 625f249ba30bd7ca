"""Benchmark of one local RL step with the offline model: rollouts vs the policy update, on this machine.

One GRPO group of MemAgent rollouts (``--group-size`` readings of one sample question, temperature 1) is
generated with SmolLM2-135M-Instruct through the local back-end and timed; then one
:class:`memrl.train.trainer.PolicyTrainer` update on that group is timed. The 135M model's own rewards are
all 0 here (it never writes a ``\\boxed{}`` answer, see README), which leaves no contrast to learn from, so
the rewards are set by hand to alternate 1, 0, 1, 0: the update's cost does not depend on which rollouts
won, only on how many tokens it trains on.

The peer in the same run is the rollout generation itself: ``update_vs_rollout`` is the update's wall time
over the rollouts'. The last line of stdout is one JSON object.

    .venv/bin/python -m bench.train                   # group of 4, chunks of 1024 tokens
    .venv/bin/python -m bench.train --group-size 8 --micro-batch 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--question", type=int, default=0, help="index of the sample question")
    ap.add_argument("--chunk-tokens", type=int, default=1024)
    ap.add_argument("--memory-tokens", type=int, default=128)
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch

    from memrl.agents.memagent import MemAgentConfig
    from memrl.data import load_dataset
    from memrl.llm.local import LocalLLM
    from memrl.train.loop import MemAgentTasks
    from memrl.train.trainer import PolicyTrainer, TrainerConfig

    t0 = time.perf_counter()
    llm = LocalLLM().load()
    load_s = time.perf_counter() - t0
    tasks = MemAgentTasks(
        load_dataset("sample")[0],
        MemAgentConfig(chunk_tokens=args.chunk_tokens, memory_tokens=args.memory_tokens, answer_tokens=32),
    )
    torch.manual_seed(args.seed)

    async def group():
        return await asyncio.gather(*(tasks.rollout(llm, args.question, 1.0) for _ in range(args.group_size)))

    t0 = time.perf_counter()
    trajs = asyncio.run(group())
    rollout_s = time.perf_counter() - t0
    own_rewards = [t.reward for t in trajs]
    for i, t in enumerate(trajs):
        if t.failure is None:  # a failed rollout keeps no reward: it is never trained on
            t.reward = float(i % 2 == 0)  # hand-set contrast (see the module docstring)

    trainer = PolicyTrainer(llm, TrainerConfig(lr=1e-6, micro_batch=args.micro_batch))
    t0 = time.perf_counter()
    m = trainer.step([trajs])
    update_s = time.perf_counter() - t0
    completion = sum(len(s.completion_ids or []) for t in trajs for s in t.steps)
    total = sum(len(s.prompt_ids or []) + len(s.completion_ids or []) for t in trajs for s in t.steps)
    result = {
        "model": llm.model,
        "group_size": args.group_size,
        "llm_calls": sum(len(t.steps) for t in trajs),
        "own_rewards": own_rewards,
        "load_s": round(load_s, 2),
        "rollout_s": round(rollout_s, 2),
        "update_s": round(update_s, 2),
        "update_vs_rollout": round(update_s / rollout_s, 3),
        "samples": int(m["samples"]),
        "completion_tokens": completion,
        "sequence_tokens": total,
        "update_tokens_per_s": round(total / update_s, 1),
        "pg_loss": m.get("pg_loss"),
        "grad_norm": m.get("grad_norm"),
        "rollout_logprob_diff": m.get("rollout_logprob_diff"),
        "load_average": os.getloadavg()[0],
    }
    print(
        f"{args.group_size} rollouts: {rollout_s:.1f} s ({result['llm_calls']} LLM calls); update on "
        f"{result['samples']} sequences ({total} tokens, {completion} generated): {update_s:.1f} s"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
