"""Measure before training: the untrained model's reward distribution on ``read`` (no variance, no gradient).

MemAgent (``memrl train grpo --task read``'s agent, memory after the section) on ``--documents`` RULER-LoCoMo
documents of LoCoMo's TRAIN conversations, ``--group-size`` rollouts each, under prompt variants: memrl's
prompts as they were until 2026-11-27 (the answer prompt with a ``\\boxed{Paris}`` example) at temperature
1.0; the answer prompt without it (memrl's since); and a chunk prompt
asking the model to copy the helpful sentences (what a small model does best). Rewards: the training F1 of
the box and MemAgent's boxed exact match. Then two GRPO updates (LoRA 16, every group kept) on the first
variant's groups, timed.

    .venv/bin/python -m bench.read_probe --documents 12 --group-size 4

Last line of stdout: one JSON object, per variant: groups with reward variance (the only groups GRPO learns
from), mean reward, rollouts with a non-zero reward, seconds and tokens per rollout; and the update times.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path

WITH_EXAMPLE = """Question: {question}

Your memory of the document:
{memory}

Answer the question from your memory. Give the final answer inside \\boxed{{}}, for example \\boxed{{Paris}}."""
NO_EXAMPLE = """Question: {question}

Your memory of the document:
{memory}

Answer the question from your memory, in a few words. Give the final answer inside \\boxed{{}}."""
COPY = """You are reading a long document, one section at a time, to answer a question.

Question: {question}

Next section:
{chunk}

Sentences copied so far:
{memory}

Copy the sentences of this section that help answer the question, after the sentences copied so far. \
Write only copied sentences."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--documents", type=int, default=12)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--length", default="1k")
    ap.add_argument("--model", help="HF folder or hub id (default: the offline SmolLM2-135M-Instruct)")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("MEMRL_DATA_DIR", str(Path(__file__).resolve().parents[2] / "shared" / "data"))

    import memrl.agents.memagent as memagent
    from memrl.agents.memagent import MemAgentConfig
    from memrl.eval.qa.config import QAEvalConfig, load_conversations
    from memrl.llm.local import LocalLLM
    from memrl.train.tasks import ReadTasks
    from memrl.train.trainer import PolicyTrainer, TrainerConfig

    docs = load_conversations(QAEvalConfig(dataset="ruler-locomo", split="train", lengths=(args.length,),
                                           questions=args.documents))  # fmt: skip
    llm = LocalLLM(args.model, max_batch_size=16).load()
    chunk = memagent.CHUNK_PROMPT_MEMORY_LAST
    variants = {  # the answer prompt with the example memrl's read prompts had until 2026-11-27
        "memrl prompts, T=1.0": (WITH_EXAMPLE, chunk, 1.0),
        "answer prompt without its example, T=0.7": (NO_EXAMPLE, chunk, 0.7),
        "+ copy-the-sentences chunk prompt, T=0.7": (NO_EXAMPLE, COPY, 0.7),
        "+ copy-the-sentences chunk prompt, T=1.0": (NO_EXAMPLE, COPY, 1.0),
    }
    result: dict = {
        "documents": len(docs),
        "group_size": args.group_size,
        "length": args.length,
        "variants": {},
    }
    first = None
    for name, (answer_prompt, chunk_prompt, temperature) in variants.items():
        memagent.ANSWER_PROMPT, memagent.CHUNK_PROMPT_MEMORY_LAST = answer_prompt, chunk_prompt
        cfg = MemAgentConfig(chunk_tokens=512, memory_tokens=48, answer_tokens=40, answer_grammar=True,
                             memory_last=True)  # fmt: skip
        tasks = ReadTasks(docs, cfg, reward="f1")

        async def roll(tasks=tasks, temperature=temperature) -> tuple[list, float]:
            t0, out = time.perf_counter(), []
            for s in range(0, len(tasks), 4):
                picks = range(s, min(len(tasks), s + 4))
                out += [
                    g[0]
                    for g in await asyncio.gather(
                        *(tasks.group(llm, i, args.group_size, temperature) for i in picks)
                    )
                ]
            await llm.aclose()
            return out, time.perf_counter() - t0

        groups, seconds = asyncio.run(roll())
        f1 = [[t.reward for t in g] for g in groups]
        em = [[t.metrics.get("reward") for t in g] for g in groups]
        result["variants"][name] = {
            "groups_with_variance_f1": sum(len(set(r)) > 1 for r in f1),
            "groups_with_variance_em": sum(len(set(r)) > 1 for r in em),
            "mean_f1": round(statistics.mean(x for r in f1 for x in r), 4),
            "rollouts_f1_above_0": sum(x > 0 for r in f1 for x in r),
            "s_per_rollout": round(seconds / (len(groups) * args.group_size), 2),
            "prompt_tokens_per_rollout": round(statistics.mean(t.prompt_tokens for g in groups for t in g), 1),
            "completion_tokens_per_rollout": round(statistics.mean(t.completion_tokens for g in groups for t in g), 1),
        }  # fmt: skip
        print(name, result["variants"][name], flush=True)
        first = first or groups
    memagent.ANSWER_PROMPT, memagent.CHUNK_PROMPT_MEMORY_LAST = WITH_EXAMPLE, chunk  # the first variant's
    trainer = PolicyTrainer(llm, TrainerConfig(lr=1e-4, lora_rank=16, dynamic_sampling=False, micro_batch=8,
                                               micro_tokens=8192))  # fmt: skip
    updates = []
    for k in range(2):
        t0 = time.perf_counter()
        m = trainer.step(first[2 * k : 2 * k + 2])
        updates.append({"seconds": round(time.perf_counter() - t0, 1), "samples": m.get("samples"),
                        "completion_tokens": m.get("n_tokens")})  # fmt: skip
    result["updates_two_groups"] = updates
    print(json.dumps(result))


if __name__ == "__main__":
    main()
