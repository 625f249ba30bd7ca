"""The ``update`` and ``build`` tasks of the learning benchmark: held-out reward before and after GRPO.

``update``: MemUpdate episodes (:class:`memrl.train.tasks.UpdateTasks`, reward ``(P_new - P_old) * E``)
on LoCoMo's observation memory, one episode per question; trained on the train conversations' questions,
evaluated greedily on a sample of the test conversations' questions stratified to their category mix.
Trivial baselines: the red team's scripted policies that use no gold answer
(:mod:`memrl.eval.redteam.update`: doing nothing, copying the question, a memory or a date, blind
merges/splits/deletes, ...), played in the very same episodes.

``build``: MemBuilder sessions with ADRPO rewards (:class:`memrl.train.tasks.BuildTasks`: the memory
before the session is the annotation expert's; per agent ``task * (1 - 0.8 LP)``); the per-item figure is
the mean over the four agents of a session; trained on train sessions, evaluated greedily on test
sessions. Trivial baselines: the red team's scripted builders (:mod:`memrl.eval.redteam.build`, no gold,
no expert), their sessions answered and judged by the same untrained model as the model's own.

The metric is the task's own training reward (x100), not an F1: these tasks have no answer to score.
Before running the benchmark, ``--eval-items 0`` means every held-out item; the documented runs use a
sample (see docs/results/learning.md).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import time
from typing import Any


@dataclasses.dataclass
class ToolItem:
    """An evaluation item as the report writes it (id, category, question, golds)."""

    id: str
    category: int
    question: str
    answers: tuple[str, ...]


def _sample(indices: list[int], cats: list[int], n: int, seed: str) -> list[int]:
    """``n`` of ``indices``, stratified by ``cats`` (largest remainders), seeded; all when n is 0."""
    if not n or n >= len(indices):
        return indices
    by: dict[int, list[int]] = {}
    for i, c in zip(indices, cats, strict=True):
        by.setdefault(c, []).append(i)
    quota = {c: n * len(v) / len(indices) for c, v in by.items()}
    take = {c: int(q) for c, q in quota.items()}
    for c in sorted(quota, key=lambda c: take[c] - quota[c])[: n - sum(take.values())]:
        take[c] += 1
    rng = random.Random(seed)
    out: list[int] = []
    for c in sorted(by):
        pool = list(by[c])
        rng.shuffle(pool)
        out += pool[: take[c]]
    return sorted(out)


def _update_sets(args: argparse.Namespace) -> tuple[Any, Any, list[int]]:
    from memrl.agents.memupdate import MemUpdateConfig
    from memrl.eval.protocol import TRAIN_SPLIT
    from memrl.eval.qa.config import QAEvalConfig, load_conversations
    from memrl.train.tasks import UpdateTasks

    cfg = MemUpdateConfig(max_tool_calls=4, max_turns=4, max_tokens=128, sample_size=5, question_hits=3,
                          tool_choice=args.tool_choice)  # fmt: skip
    train = UpdateTasks(
        load_conversations(QAEvalConfig(dataset="locomo", split=TRAIN_SPLIT)), cfg, embedder=args.embedder
    )
    test = UpdateTasks(
        load_conversations(QAEvalConfig(dataset="locomo", split=args.eval_split)), cfg, embedder=args.embedder
    )
    idx = list(range(len(test)))
    chosen = _sample(idx, [int(q.category_id) for _, q in test.items], args.eval_items, "learning-eval")
    return train, test, chosen


def _build_sets(args: argparse.Namespace) -> tuple[Any, Any, list[int]]:
    from memrl.agents.membuilder import MemBuilderConfig
    from memrl.eval.protocol import TRAIN_SPLIT
    from memrl.eval.qa.config import QAEvalConfig, load_conversations
    from memrl.train.tasks import BuildTasks

    cfg = MemBuilderConfig(max_operations=2, max_item_chars=120)
    train = BuildTasks(
        load_conversations(QAEvalConfig(dataset="locomo", split=TRAIN_SPLIT)), cfg, embedder=args.embedder
    )
    test = BuildTasks(
        load_conversations(QAEvalConfig(dataset="locomo", split=args.eval_split)), cfg, embedder=args.embedder
    )
    idx = list(range(len(test)))
    chosen = _sample(idx, [0] * len(idx), args.eval_items, "learning-eval")
    return train, test, chosen


async def _evaluate(task: str, llm: Any, tasks: Any, chosen: list[int]) -> list[dict[str, Any]]:
    """Greedy episodes (update) or sessions (build) of the model on the chosen held-out items."""
    if task == "update":
        trajs = await asyncio.gather(*(tasks.rollout(llm, i, 0.0) for i in chosen))
        rows = []
        for t in trajs:
            if t.reward is None:
                raise SystemExit(f"held-out episode {t.task_id} failed: {t.failure}")
            calls = [c.get("name") for s in t.steps for c in (s.tool_calls or [])]
            rows.append({"reward": float(t.reward), "prediction": " ".join(map(str, calls)) or "(no tool call)",
                         **{k: t.metrics.get(k) for k in ("p_old", "p_new", "efficiency")}})  # fmt: skip
        return rows
    rows = []
    for i in chosen:  # one session at a time: each clones the shared memory before it
        groups = await tasks.group(llm, i, 1, 0.0)
        rewards = {g[0].info["memory_type"]: g[0].reward for g in groups}
        if any(r is None for r in rewards.values()):
            raise SystemExit(f"held-out session {i} failed: {[g[0].failure for g in groups]}")
        rows.append({"reward": sum(rewards.values()) / len(rewards), "prediction": str(rewards), **rewards})
    return rows


async def _trivial(task: str, llm: Any, tasks: Any, chosen: list[int], train: Any) -> dict[str, list[dict]]:
    """The red team's scripted policies without gold answers, on the same items (see the docstring)."""
    from memrl.llm.scripted import ScriptedLLM

    out: dict[str, list[dict]] = {}
    if task == "update":
        from memrl.agents.memupdate import run_episode
        from memrl.eval.redteam import HONEST
        from memrl.eval.redteam.items import Item, frequent_answers
        from memrl.eval.redteam.update import UPDATE_POLICIES, update_policy

        frequent = frequent_answers(train.conversations)
        for name in (p for p in UPDATE_POLICIES if p != HONEST):
            rows = []
            for i in chosen:
                conv, q = tasks.items[i]
                script = ScriptedLLM(update_policy(name, Item(conv, q), frequent.get(q.category, [])))
                res = await run_episode(script, tasks.memory, f"{conv.id}@obs", conv, q, config=tasks.config)
                rows.append({"reward": float(res.trajectory.reward or 0.0), "prediction": name})
            out[name.replace(" ", "_")] = rows
        return out
    from memrl.agents.membuilder import MemBuilderAgent
    from memrl.agents.membuilder.adrpo import rollout_group
    from memrl.eval.redteam import HONEST
    from memrl.eval.redteam.build import BUILD_POLICIES, build_policy

    for name in (p for p in BUILD_POLICIES if p != HONEST):
        rows = []
        for i in chosen:
            conv, session, questions = tasks.items[i]
            builder = MemBuilderAgent(ScriptedLLM(build_policy(name, conv, session)), tasks.config)
            ns = tasks._before(conv, session.index)
            (result, score), = await rollout_group(builder, tasks.memory, ns, conv, session, 1, answer_llm=llm,
                                                   questions=questions, decoys=tasks.decoys[(conv.id, session.index)],
                                                   expert_chars=tasks.expert_chars[(conv.id, session.index)])  # fmt: skip
            await tasks.memory.reset(namespace=f"{ns}#g0")
            rewards = [t.reward for t in result.trajectories if t.reward is not None]
            rows.append({"reward": sum(rewards) / max(1, len(rewards)), "prediction": name})
        out[name.replace(" ", "_")] = rows
    return out


def run(args: argparse.Namespace, t0: float) -> dict[str, Any]:
    """Trivial baselines, before, training, after, on the task's own reward."""
    from memrl.llm.local import LocalLLM
    from memrl.train.loop import LoopConfig, train
    from memrl.train.trainer import TrainerConfig

    timings: dict[str, float] = {}
    train_set, test_set, chosen = (_update_sets if args.task == "update" else _build_sets)(args)
    llm = LocalLLM(
        args.model, max_batch_size=args.batch, threads=args.threads, device=getattr(args, "device", "cpu")
    ).load()

    async def prepare() -> tuple[list, dict]:
        await test_set.setup()
        try:
            t = time.perf_counter()
            before = await _evaluate(args.task, llm, test_set, chosen)
            timings["eval_before_s"] = time.perf_counter() - t
            t = time.perf_counter()
            trivial = await _trivial(args.task, llm, test_set, chosen, train_set)
            timings["baselines_s"] = time.perf_counter() - t
            return before, trivial
        finally:
            await test_set.close()
            await llm.aclose()

    before, trivial = asyncio.run(prepare())
    loop = LoopConfig(steps=args.steps, group_size=args.group_size, tasks_per_step=args.tasks_per_step,
                      temperature=args.temperature, save_every=10**6, seed=args.seed,
                      output_dir=str(args.out / "train"))  # fmt: skip
    trainer = TrainerConfig(lr=args.lr, lora_rank=args.lora_rank, kl_coef=args.kl_coef, micro_batch=args.micro_batch,
                            micro_tokens=args.micro_tokens, max_grad_norm=args.max_grad_norm)  # fmt: skip
    left = args.budget_minutes * 60 - (time.perf_counter() - t0) - timings["eval_before_s"] - args.margin_s
    t = time.perf_counter()
    rows = train(llm, train_set, loop, trainer, progress=not args.quiet, time_limit_s=max(0.0, left))
    timings["train_s"] = time.perf_counter() - t

    async def after_eval() -> list:
        await test_set.setup()
        try:
            return await _evaluate(args.task, llm, test_set, chosen)
        finally:
            await test_set.close()
            await llm.aclose()

    t = time.perf_counter()
    after = asyncio.run(after_eval())
    timings["eval_after_s"] = time.perf_counter() - t
    if args.task == "update":
        items = [ToolItem(q.id, int(q.category_id), q.question, tuple(q.answers))
                 for q in (test_set.items[i][1] for i in chosen)]  # fmt: skip
    else:
        items = [
            ToolItem(f"{c.id}:s{s.index}", 0, f"session {s.index}", ())
            for c, s, _ in (test_set.items[i] for i in chosen)
        ]
    return {"items": items, "before": before, "after": after, "trivial": trivial, "rows": rows, "timings": timings,
            "metric": "reward", "metric_label": f"{args.task} reward x100", "reward_name": args.task,
            "setting": {"n_train_items": len(train_set), "n_test_items_all": len(test_set),
                        **({"tool_choice": args.tool_choice} if args.task == "update" else {})}}  # fmt: skip
