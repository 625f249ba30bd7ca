"""The expert arms of :mod:`bench.learning_arms` (issue 54's second experiment): LoRA SFT of ``read`` on an
expert reader's trajectories over the fit items, alone or followed by GRPO, for a RULER task whose expert
may not fit the memory budget.

Two experts (``--expert``), both :class:`memrl.agents.read_expert.ExpertReader` over the item's needle
sentences, answering the values its final memory holds (never a value it did not keep):

* ``cut``: the memory is the needle sentences read so far, verbatim, cut to the budget in the student's
  tokens: at 48 tokens it keeps about two of niah_multivalue's four ``One of the special magic numbers for
  KEY is: VALUE.`` sentences;
* ``compressed``: the memory is ``KEY: v1`` then one value a line, which fits all four: the ceiling an
  expert that compresses would teach.

The SFT uses the arms' learning rate and LoRA rank; ``--sft-epochs`` passes over the examples, or as many
as fit ``--sft-seconds`` (SFT alone given the time SFT then GRPO took). ``expert-sft-grpo`` merges the SFT
adapter into the weights and runs GRPO (:func:`memrl.train.loop.train`, a fresh adapter; its
``kl_to_start`` is to the SFT model) on ``--rollouts`` rollouts. Writes ``OUT/train/sft_metrics.jsonl``
(one row per optimizer step: loss; the last row adds ``kl_to_start``, the adapter switched off as the
start) beside GRPO's files (``metrics.jsonl``, ``reward.png``).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
from pathlib import Path
from typing import Any

EXPERTS = ("cut", "compressed")


def expert_lines(item: Any, expert: str) -> tuple[list[str], list[str], Any]:
    """The needle sentences the expert watches for, what its memory writes for each, and its answer (a
    function of the final memory: the gold values it holds, in gold order)."""
    answers = list(item.answers)
    needles = [n for n in item.metadata.get("needles", []) if any(a in n for a in answers)]
    if not needles:
        raise SystemExit(f"{item.id}: no needle sentence holds a gold value (not a RULER needle item?)")
    if expert == "cut":
        lines = list(needles)
    elif expert == "compressed":
        key = (item.metadata.get("keys") or ["the key"])[0]
        values = [next(a for a in answers if a in n) for n in needles]
        lines = [f"{key}: {values[0]}", *values[1:]]
    else:
        raise SystemExit(f"--expert must be one of {', '.join(EXPERTS)}, got {expert!r}")

    def answer(memory: str) -> str:
        return ", ".join(a for a in answers if a in memory)

    return needles, lines, answer


def expert_trajectories(llm: Any, items: list[Any], convs: list[Any], config: Any, expert: str) -> list[Any]:
    """One expert trajectory per fit item (MemAgent driven by the expert: each call is an SFT example)."""
    from memrl.agents.memagent import MemAgent, render_conversation
    from memrl.agents.read_expert import ExpertReader

    async def one(it: Any, conv: Any) -> Any:
        turns, lines, answer = expert_lines(it, expert)
        reader = ExpertReader(llm, turns, lines, answer, config.memory_tokens, config.initial_memory)
        res = await MemAgent(reader.llm, config).run(conv.questions[0].question, render_conversation(conv),
                                                     task_id=conv.id)  # fmt: skip
        if res.trajectory.failure is not None:
            raise RuntimeError(f"expert reading of {it.id} failed: {res.trajectory.failure}")
        return res.trajectory

    async def every() -> list[Any]:
        return [await one(it, c) for it, c in zip(items, convs, strict=True)]

    return asyncio.run(every())


def values_kept(trajs: list[Any], items: list[Any]) -> float:
    """The share of gold values the expert's final memory holds (what its SFT can teach at best)."""
    kept = []
    for traj, it in zip(trajs, items, strict=True):
        chunks = [s for s in traj.steps if s.role.startswith("chunk")]
        memory = chunks[-1].response if chunks else ""
        kept.append(sum(a in memory for a in it.answers) / len(it.answers))
    return sum(kept) / len(kept) if kept else 0.0


def expert_sft(
    llm: Any, args: argparse.Namespace, items: list[Any], convs: list[Any], config: Any
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """LoRA SFT on the expert's trajectories, in place on ``llm``: (metrics rows, summary)."""
    from memrl.train.raft import _kl
    from memrl.train.sft import SFTConfig, SFTTrainer, epochs_for, sft_samples

    trajs = expert_trajectories(llm, items, convs, config, args.expert)
    samples, skipped = sft_samples(
        llm, trajs, max_reply_tokens=max(config.memory_tokens, config.answer_tokens)
    )
    seconds = getattr(args, "sft_seconds", None)
    epochs = epochs_for(args.sft_epochs, seconds)
    trainer = SFTTrainer(llm, SFTConfig(lr=args.lr, epochs=epochs, batch_size=args.sft_batch, micro_batch=1,
                                        seed=args.seed, save_every=10**6, lora_rank=args.lora_rank))  # fmt: skip
    out = args.out / "train"
    rows = trainer.fit(samples, out, progress=not args.quiet, time_limit_s=seconds)
    shutil.rmtree(out / "checkpoint", ignore_errors=True)  # the merged model: not kept (the adapter is)
    if rows:
        rows[-1].update(_kl(trainer, samples, lora=True))
    summary = {"expert": args.expert, "documents": len(trajs), "examples": len(samples), "skipped": skipped,
               "expert_values_kept": round(values_kept(trajs, items), 4), "sft_steps": len(rows),
               "loss_first": rows[0]["loss"] if rows else None, "loss_last": rows[-1]["loss"] if rows else None}  # fmt: skip
    return rows, summary


def then_grpo(llm: Any, args: argparse.Namespace, tasks: Any, heldout: Any) -> list[dict[str, Any]]:
    """The SFT adapter saved (``--adapter-dir``/sft) and merged, then GRPO with a fresh adapter."""
    from bench.learning_arms import grpo
    from memrl.llm.local.adapters import merge
    from memrl.train.lora import save_adapter

    if args.adapter_dir:
        (args.adapter_dir / "sft").mkdir(parents=True, exist_ok=True)
        save_adapter(llm.hf_model, args.adapter_dir / "sft")
    merge(llm.hf_model)
    return grpo(llm, args, tasks, heldout)  # OUT/train/, beside the SFT's sft_metrics.jsonl


def load_stacked(llm: Any, run: dict[str, Any], rank: int) -> None:
    """An ``expert-sft-grpo`` run's policy on ``llm``: its SFT adapter merged, then its GRPO adapter."""
    from memrl.llm.local.adapters import merge
    from memrl.train.lora import add_lora, load_adapter

    folder = Path(run["trained"]["adapter"])
    add_lora(llm.hf_model, rank=rank, alpha=32.0)
    load_adapter(llm.hf_model, folder / "sft")
    merge(llm.hf_model)
    add_lora(llm.hf_model, rank=rank, alpha=32.0)
    load_adapter(llm.hf_model, folder)


def main(argv: list[str] | None = None) -> None:
    """``python -m bench.learning_expert [learning_arms arguments]``: the share of the gold values each
    expert's final memory holds on the fit items (no training); one JSON line."""
    import json
    import sys

    from bench.learning_arms import parse
    from bench.learning_ruler import generated, reader_config
    from memrl.llm.local import LocalLLM

    args = parse(["--arm", "expert-sft", "--out", "/tmp/memrl-expert-kept", *(argv or sys.argv[1:])])
    items, convs, digest = generated(args, "fit", args.train_items)
    llm = LocalLLM(args.model).load()
    config = reader_config(args)
    kept = {
        e: round(values_kept(expert_trajectories(llm, items, convs, config, e), items), 4) for e in EXPERTS
    }
    print(json.dumps({"values_kept": kept, "ruler_task": args.ruler_task, "memory_tokens": args.memory_tokens,
                      "fit_items": len(items), "fit_sha256": digest}))  # fmt: skip


if __name__ == "__main__":
    main()
