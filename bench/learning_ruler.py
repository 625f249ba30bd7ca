"""The ``read`` task of the learning benchmark on one of RULER's generated needle tasks (``--ruler-task``):
MemAgent reads a haystack chunk by chunk into a bounded memory and answers in a grammar-forced ``\\boxed{}``.

Items are generated, never drawn from an evaluation's files: ``fit`` (training) with seed 1, ``validation``
with seed 2, ``test`` with seed 3 (``memrl eval ruler`` uses seed 0), ``--train-items`` and
``--eval-items`` of them at ``--length`` tokens of the trained model's tokenizer, written with their sha256
under ``OUT/data`` and read back through the ``ruler-synthetic`` loader. Single-answer tasks, or tasks asking
for several values (niah_multivalue) with ``--reward values`` (the box as a value set). Scored as ``memrl
eval ruler`` scores: RULER's metric on the whole final reply (``score``, x100), the box's exact match beside
it (``em``; for several values: the box names exactly the gold set, and ``values`` the value-set reward).

The systems, on the same held-out items: the untrained model, the SFT model (``--sft-minutes``/``--sft-steps``:
an expert reader whose memory keeps the needle sentences it has read, :class:`memrl.agents.read_expert.ExpertReader`,
then the gold in a box), SFT + GRPO (``memrl train grpo``'s loop on :class:`memrl.train.tasks.ReadTasks`
over the fit items), and two rules that use no model: ``first needle`` (the value of the first sentence
shaped like a needle) and ``key lookup`` (the value of the needle naming the asked key: RULER's needle
tasks are solved by a regular expression, which is why a model's figure here measures reading, not
understanding). Each item is its own document: intervals resample items.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import re
import time
from typing import Any

#: Generation seeds of the protocol's parts (``memrl eval ruler``'s default is 0).
SEEDS = {"fit": 1, "validation": 2, "test": 3}
_NEEDLE = re.compile(r"One of the special magic \w+ for (.+?) is: (.+?)\.(?=\s|$)")


def generated(args: argparse.Namespace, part: str, count: int) -> tuple[list[Any], list[Any], str]:
    """``count`` items of ``part`` (their seed), written under ``OUT/data`` and loaded back as documents
    conversations: (items, conversations, sha256)."""
    from memrl.data import load_conversations
    from memrl.data.ruler import parse_lengths
    from memrl.data.ruler.synthetic import generate, load_essays, write_items
    from memrl.data.ruler.tasks import TASKS
    from memrl.eval.ruler.run import token_counter

    (length,) = parse_lengths([args.length])
    essays = None
    if TASKS[args.ruler_task].options.get("haystack") == "essay":
        from memrl.data.download import resolve_data_dir

        essays = load_essays(resolve_data_dir(None) / "paulgraham")
    count_tokens = token_counter(args.model or "model")
    items = generate(args.ruler_task, length.tokens or 0, count=count, seed=SEEDS[part], label=length.label,
                     count_tokens=count_tokens, essays=essays)  # fmt: skip
    several = [it.id for it in items if len(it.answers) != 1]
    if several and getattr(args, "reward", None) != "values":
        raise SystemExit(
            f"{args.ruler_task} asks for several values ({several[0]}): this reward scores one box against "
            "one gold; use --reward values (the box as a value set)"
        )
    path = args.out / "data" / f"{part}_{args.ruler_task}_{length.label}.jsonl"
    digest = write_items(items, path)
    convs, _ = load_conversations("ruler-synthetic", path)
    return items, convs, digest


def rules(items: list[Any]) -> dict[str, list[str]]:
    """The no-model rules' predictions (module docstring)."""
    first, lookup = [], []
    for it in items:
        needles = _NEEDLE.findall(it.context)
        first.append(needles[0][1] if needles else "")
        keys = it.metadata.get("keys") or []
        asked = [v for k, v in needles if keys and k == keys[0]]
        lookup.append(", ".join(asked) if len(it.answers) > 1 else asked[0] if asked else "")
    return {"first needle": first, "key lookup": lookup}


def score(prediction: str, item: Any, boxed: str | None = None) -> dict[str, float]:
    """RULER's metric on the whole reply (0-1) and the box's exact match; for an item with several values,
    the value-set reward of the box (``values``) and ``em`` = the box names exactly the gold set."""
    from memrl.rewards.memagent import value_set_reward
    from memrl.scoring.metrics import string_match_all, string_match_part

    metric = string_match_all if item.metric == "string_match_all" else string_match_part
    box = boxed if boxed is not None else prediction
    if len(item.answers) > 1:
        values = value_set_reward("\\boxed{" + box + "}", list(item.answers))
        return {"score": metric(prediction, item.answers), "em": float(values == 1.0), "values": values}
    return {"score": metric(prediction, item.answers),
            "em": float(box.strip().lower() in {a.lower() for a in item.answers})}  # fmt: skip


def reader_config(args: argparse.Namespace) -> Any:
    from memrl.agents.memagent import MemAgentConfig

    return MemAgentConfig(chunk_tokens=args.chunk_tokens, memory_tokens=args.memory_tokens,
                          answer_tokens=args.answer_tokens, answer_grammar=True,
                          memory_last=not args.memory_first)  # fmt: skip


def evaluate(llm: Any, items: list[Any], convs: list[Any], config: Any) -> list[dict[str, Any]]:
    """Greedy MemAgent on every item (concurrently: the back-end batches), scored; each row also says
    whether the final memory holds the needle's value (the share of the values, for several)."""
    from memrl.agents.memagent import MemAgent, render_conversation

    cfg = dataclasses.replace(config, temperature=0.0)

    async def run_all() -> list[Any]:
        try:
            return list(await asyncio.gather(*(
                MemAgent(llm, cfg).run(c.questions[0].question, render_conversation(c), task_id=c.id) for c in convs
            )))  # fmt: skip
        finally:
            await llm.aclose()

    rows = []
    for it, res in zip(items, asyncio.run(run_all()), strict=True):
        if res.trajectory.failure is not None:
            raise SystemExit(f"evaluation of {it.id} failed: {res.trajectory.failure}")
        rows.append({"prediction": res.final_text, "boxed": res.answer, **score(res.final_text, it, res.answer or ""),
                     "needle_in_memory": sum(a in res.memory for a in it.answers) / len(it.answers),
                     "chunks": res.chunks_read,
                     "completion_tokens": res.trajectory.completion_tokens})  # fmt: skip
    return rows


def sft_stage(
    llm: Any, items: list[Any], convs: list[Any], config: Any, args: argparse.Namespace
) -> dict[str, Any]:
    """Supervised warm start (in place, full weights) on the expert reader's trajectories over the fit items."""
    from memrl.agents.memagent import MemAgent, render_conversation
    from memrl.agents.read_expert import ExpertReader
    from memrl.train.sft import SFTConfig, SFTTrainer, epochs_for, sft_samples

    async def expert(it: Any, conv: Any) -> Any:
        needles = [n for n in it.metadata.get("needles", []) if any(a in n for a in it.answers)]
        reader = ExpertReader(
            llm, needles, needles, it.answers[0], config.memory_tokens, config.initial_memory
        )
        res = await MemAgent(reader.llm, config).run(conv.questions[0].question, render_conversation(conv),
                                                     task_id=conv.id)  # fmt: skip
        if res.trajectory.failure is not None:
            raise RuntimeError(f"expert reading of {it.id} failed: {res.trajectory.failure}")
        return res.trajectory

    async def all_experts() -> list[Any]:
        return [await expert(it, c) for it, c in zip(items, convs, strict=True)]

    trajs = asyncio.run(all_experts())
    samples, skipped = sft_samples(
        llm, trajs, max_reply_tokens=max(config.memory_tokens, config.answer_tokens)
    )
    trainer = SFTTrainer(llm, SFTConfig(lr=args.sft_lr, epochs=epochs_for(args.sft_epochs, args.sft_minutes), batch_size=args.sft_batch,
                                        micro_batch=1, seed=args.seed, save_every=10**6,
                                        autocast=args.sft_autocast))  # fmt: skip
    rows = trainer.fit(samples, args.out / "sft", progress=not args.quiet, max_steps=args.sft_steps or None,
                       time_limit_s=60 * args.sft_minutes or None)  # fmt: skip
    return {"documents": len(trajs), "examples": len(samples), "skipped": skipped, "steps": len(rows),
            "examples_seen": min(len(samples), len(rows) * args.sft_batch), "lr": args.sft_lr,
            "loss_first": rows[0]["loss"] if rows else None, "loss_last": rows[-1]["loss"] if rows else None}  # fmt: skip


def held_out(args: argparse.Namespace) -> tuple[list[Any], list[Any], str, dict[str, list[dict[str, Any]]]]:
    """The held-out items (validation or test), their conversations, sha256, and the rules' scored rows."""
    items, convs, digest = generated(args, args.eval_split, args.eval_items or 64)
    trivial = {name: [{"prediction": p, **score(p, it)} for p, it in zip(preds, items, strict=True)]
               for name, preds in rules(items).items()}  # fmt: skip
    return items, convs, digest, trivial


def questions(convs: list[Any]) -> list[Any]:
    return [c.questions[0] for c in convs]


def baselines_only(args: argparse.Namespace, t0: float) -> dict[str, Any]:
    """The rules alone on the held-out items."""
    items, convs, digest, trivial = held_out(args)
    return {"task": "read", "ruler_task": args.ruler_task, "length": args.length, "eval_split": args.eval_split,
            "n_eval": len(items), "sha256": digest,
            "rules": {name: round(100 * sum(r["score"] for r in rows) / len(rows), 2) for name, rows in trivial.items()},
            "wall_time_s": round(time.perf_counter() - t0, 1)}  # fmt: skip


def run(args: argparse.Namespace, t0: float) -> dict[str, Any]:
    """Rules, untrained, SFT, SFT + GRPO on the same held-out items (module docstring)."""
    from bench.learning_read import grpo_and_score
    from memrl.llm.local import LocalLLM
    from memrl.train.tasks import ReadTasks

    timings: dict[str, float] = {}
    t = time.perf_counter()
    fit_items, fit_convs, fit_digest = generated(args, "fit", args.train_items)
    items, convs, digest, trivial = held_out(args)
    timings["data_s"] = time.perf_counter() - t
    llm = LocalLLM(args.model, max_batch_size=args.batch, threads=args.threads, device=args.device).load()
    config = reader_config(args)
    t = time.perf_counter()
    before = evaluate(llm, items, convs, config)
    timings["eval_before_s"] = eval_s = time.perf_counter() - t
    extra: dict[str, Any] = {}
    if args.sft_steps or args.sft_minutes:
        t = time.perf_counter()
        extra["sft"] = sft_stage(llm, fit_items, fit_convs, config, args)
        timings["sft_s"] = time.perf_counter() - t
        t = time.perf_counter()
        extra["after_sft"] = evaluate(llm, items, convs, config)
        timings["eval_after_sft_s"] = time.perf_counter() - t
    tasks = ReadTasks(fit_convs, config, reward=args.reward)
    left = args.budget_minutes * 60 - (time.perf_counter() - t0) - 1.25 * eval_s - args.margin_s
    rows, after = grpo_and_score(
        llm, tasks, args, left, timings, extra.get("after_sft"), lambda: evaluate(llm, items, convs, config)
    )
    setting = {"ruler_task": args.ruler_task, "length": args.length, "chunk_tokens": args.chunk_tokens,
               "memory_tokens": args.memory_tokens, "answer_tokens": args.answer_tokens, "reward": args.reward,
               "n_train_items": len(fit_items), "seeds": {"fit": SEEDS["fit"], args.eval_split: SEEDS[args.eval_split]},
               "sha256": {"fit": fit_digest, args.eval_split: digest}}  # fmt: skip
    extra["evidence"] = {name: {"needle_in_memory": round(sum(r["needle_in_memory"] for r in rs) / len(rs), 3)}
                         for name, rs in (("before", before), ("after", after))}  # fmt: skip
    return {"items": questions(convs), "before": before, "after": after, "trivial": trivial, "rows": rows,
            "timings": timings, "setting": setting, "metric": "score",
            "metric_label": "RULER string_match_all x100 (the whole reply, as memrl eval ruler scores)",
            "eval_description": f"{len(items)} generated {args.ruler_task} items at {args.length} ({args.eval_split}, seed "
                                f"{SEEDS[args.eval_split]})", **extra}  # fmt: skip
