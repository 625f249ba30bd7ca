"""``read`` GRPO step time at several document lengths, with and without the shared chunk prefix.

``memrl train grpo --task read``'s loop (:func:`memrl.train.loop.train`, LoRA) on RULER-LoCoMo documents
of LoCoMo's train conversations at each ``--lengths`` value, for ``--steps`` steps, in two prompt orders:
``memory_first`` (MemAgent's original chunk prompt: the G rollouts of a group share only the question's
opening, so each prompt is prefilled and trained on in full) and ``memory_last`` (the section before the
memory: a group's chunk prompts share everything but the memory, prefilled once in generation and run
once in the update). Same documents, seed, group size and budgets for both; the first step of each run
is a warm-up and is reported apart.

    .venv/bin/python -m bench.read_step --lengths 1k,2k,4k --steps 3

Last line of stdout: one JSON object, per length and order: seconds per step (rollout, update), tokens per
rollout (prompt, completion), and ``speedup`` (memory_first / memory_last, steady steps).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path


def run(length: str, memory_last: bool, args: argparse.Namespace, out: Path) -> dict:
    from memrl.agents.memagent import MemAgentConfig
    from memrl.eval.qa.config import QAEvalConfig, load_conversations
    from memrl.llm.local import LocalLLM
    from memrl.train.loop import LoopConfig, train
    from memrl.train.tasks import ReadTasks
    from memrl.train.trainer import TrainerConfig

    docs = load_conversations(
        QAEvalConfig(dataset="ruler-locomo", split="train", lengths=(length,), questions=16)
    )
    cfg = MemAgentConfig(chunk_tokens=args.chunk_tokens, memory_tokens=args.memory_tokens,
                         answer_tokens=args.answer_tokens, answer_grammar=True, memory_last=memory_last)  # fmt: skip
    llm = LocalLLM(max_batch_size=16).load()
    tasks = ReadTasks(docs, cfg, reward="f1")
    loop = LoopConfig(steps=args.steps, group_size=args.group_size, tasks_per_step=1, temperature=0.7,
                      save_every=10**6, seed=0, output_dir=str(out), tensorboard=False)  # fmt: skip
    trainer = TrainerConfig(lr=1e-4, lora_rank=16, dynamic_sampling=False, micro_batch=8, micro_tokens=8192)
    rows = train(llm, tasks, loop, trainer, progress=False)
    rollouts = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
    steady = rows[1:] or rows
    mean = lambda k: round(sum(r[k] for r in steady) / len(steady), 2)  # noqa: E731
    tok = llm.tokenizer
    return {
        "doc_tokens": round(sum(len(tok.encode(d.metadata["context"])) for d in docs) / len(docs)),
        "first_step_s": rows[0]["seconds"], "s_per_step": mean("seconds"), "rollout_s": mean("rollout_seconds"),
        "update_s": round(mean("seconds") - mean("rollout_seconds"), 2),
        "chunks_per_rollout": round(sum(r["metrics"].get("chunks", 0) for r in rollouts) / len(rollouts), 2),
        "completion_tokens_per_step": mean("n_tokens"),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", default="1k,2k,4k")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--chunk-tokens", type=int, default=512)
    ap.add_argument("--memory-tokens", type=int, default=48)
    ap.add_argument("--answer-tokens", type=int, default=40)
    ap.add_argument("--orders", default="memory_first,memory_last")
    ap.add_argument("--out", type=Path, default=Path("runs/read-step"))
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("MEMRL_DATA_DIR", str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    result: dict = {"group_size": args.group_size, "chunk_tokens": args.chunk_tokens, "memory_tokens": args.memory_tokens,
                    "steps": args.steps, "lora_rank": 16, "lengths": {}}  # fmt: skip
    for length in args.lengths.split(","):
        per = {}
        for order in args.orders.split(","):
            out = args.out / f"{length}-{order}"
            shutil.rmtree(out, ignore_errors=True)
            t0 = time.perf_counter()
            per[order] = run(length, order == "memory_last", args, out)
            per[order]["wall_s"] = round(time.perf_counter() - t0, 1)
            print(length, order, per[order], flush=True)
        if "memory_first" in per and "memory_last" in per:
            per["speedup"] = round(per["memory_first"]["s_per_step"] / per["memory_last"]["s_per_step"], 2)
        result["lengths"][length] = per
    print(json.dumps(result))


if __name__ == "__main__":
    main()
