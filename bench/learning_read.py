"""The ``read`` task of the learning benchmark: MemAgent on short RULER-LoCoMo documents, trained with
``memrl train grpo``'s code on the protocol's fit conversations, evaluated on documents built from its
validation (or, ``--eval-split test``, test) conversations.

A document is a question's evidence session(s) hidden among distractor sessions of the *same split's*
other conversations, up to ``--length`` tokens (``ruler-locomo --split train|test``; documents are built
with seed 0 whatever the training seed, so every seed is evaluated on the same documents). MemAgent reads
it in ``--chunk-tokens`` chunks, writes a memory of at most ``--memory-tokens`` after each, and answers
in a grammar-forced ``\\boxed{}``. Training: :func:`memrl.train.loop.train` on
:class:`memrl.train.tasks.ReadTasks` (LoRA), reward ``--reward`` (``f1``: the training F1 of the box,
every extra list part charged; ``reward``: MemAgent's boxed exact match), after an optional SFT warm
start (``--sft-minutes``/``--sft-steps``: the expert trajectories of ``bench/read_sft.py`` on the same TRAIN
documents, full weights, in place). Evaluation: greedy, the same
reading settings, before and after training, on a sample of the test documents stratified to the
category mix of all their category 1-4 questions (``--eval-items 0``: all of them).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import random
import time
from collections.abc import Sequence
from typing import Any

from memrl.agents.read_expert import evidence_lines


def documents(split: str, length: str) -> list[Any]:
    """RULER-LoCoMo documents of one LoCoMo split (gold and distractor sessions from that split only)."""
    from memrl.eval.qa.config import QAEvalConfig, load_conversations

    return load_conversations(QAEvalConfig(dataset="ruler-locomo", split=split, lengths=(length,), seed=0))


def stratified(docs: Sequence[Any], n: int | None, seed: str = "learning-eval") -> list[Any]:
    """``n`` documents whose LoCoMo categories keep the mix of ``docs`` (largest remainders), seeded; all
    of them (in a stable order) when ``n`` is None or not smaller."""
    from bench.learning_baselines import _locomo_id

    docs = sorted(docs, key=lambda c: c.id)
    if not n or n >= len(docs):
        return docs
    by_cat: dict[int, list[Any]] = {}
    for d in docs:
        by_cat.setdefault(_locomo_id(d.metadata["locomo_category"]), []).append(d)
    quota = {c: n * len(v) / len(docs) for c, v in by_cat.items()}
    take = {c: int(q) for c, q in quota.items()}
    for c in sorted(quota, key=lambda c: take[c] - quota[c])[: n - sum(take.values())]:
        take[c] += 1
    rng = random.Random(seed)
    out = []
    for c in sorted(by_cat):
        pool = list(by_cat[c])
        rng.shuffle(pool)
        out += pool[: take[c]]
    return sorted(out, key=lambda d: d.id)


def reader_config(args: argparse.Namespace) -> Any:
    from memrl.agents.memagent import MemAgentConfig

    return MemAgentConfig(chunk_tokens=args.chunk_tokens, memory_tokens=args.memory_tokens,
                          answer_tokens=args.answer_tokens, answer_grammar=True,
                          memory_last=not args.memory_first)  # fmt: skip


@functools.cache
def _locomo() -> dict[str, Any]:
    """Every LoCoMo conversation by id (both splits), loaded once."""
    from memrl.eval.qa.config import QAEvalConfig, load_conversations

    return {c.id: c for split in ("train", "test")
            for c in load_conversations(QAEvalConfig(dataset="locomo", split=split))}  # fmt: skip


def evidence_in(doc: Any, memory: str) -> float | None:
    """What a memory holds of the evidence: the share of the content words (stemmed, stopwords out) of the question's evidence turns that
    ``memory`` holds, in [0, 1]; None when the question has no evidence turn with content words."""
    from memrl.memory.analysis import content_terms

    words = {w for line in evidence_lines(doc, _locomo()) for w in content_terms(line.split(": ", 1)[-1])}
    if not words:
        return None
    return len(words & set(content_terms(memory or ""))) / len(words)


def bm25_finds_evidence(docs: Sequence[Any], items: Sequence[Any], k: int) -> float:
    """The share of documents whose top ``k`` turns by BM25 for the question (the rules' ranking,
    :func:`bench.learning_baselines.document_item`) include one of its evidence turns: what the no-model rules
    find, to set beside what the reader's memory holds."""
    hits = 0
    for doc, it in zip(docs, items, strict=True):
        lines = evidence_lines(doc, _locomo())
        hits += any(c.text and c.text in line for c in it.candidates[:k] for line in lines)
    return round(hits / max(1, len(docs)), 3)


def evaluate(llm: Any, docs: Sequence[Any], items: Sequence[Any], config: Any, *,
             prefill_bf16: bool = False) -> list[dict[str, Any]]:  # fmt: skip
    """Greedy MemAgent on every document (concurrently: the back-end batches), scored per item; each row
    also says how much of the question's evidence the final memory holds (:func:`evidence_in`).
    ``prefill_bf16``: the back-end runs prompts in bfloat16 meanwhile (an evaluation-only setting)."""
    from bench.learning_baselines import score_prediction
    from memrl.agents.memagent import MemAgent, render_conversation

    cfg = dataclasses.replace(config, temperature=0.0)

    async def one(doc: Any) -> Any:
        q = doc.questions[0]
        return await MemAgent(llm, cfg).run(q.question, render_conversation(doc), task_id=q.id)

    async def run_all() -> list[Any]:
        try:
            return list(await asyncio.gather(*(one(d) for d in docs)))
        finally:
            await llm.aclose()

    engine = llm.engine
    engine.prefill_bf16 = prefill_bf16
    try:
        results = asyncio.run(run_all())
    finally:
        engine.prefill_bf16 = False
    rows = []
    for doc, it, res in zip(docs, items, results, strict=True):
        if res.trajectory.failure is not None:
            raise SystemExit(f"evaluation of {it.id} failed: {res.trajectory.failure}")
        prediction = res.answer if res.answer is not None else ""
        rows.append({"prediction": prediction, **score_prediction(prediction, it), "memory": res.memory,
                     "evidence_in_memory": evidence_in(doc, res.memory),
                     "chunks": res.chunks_read, "completion_tokens": res.trajectory.completion_tokens})  # fmt: skip
    return rows


def sft_stage(llm: Any, train_docs: Sequence[Any], config: Any, args: argparse.Namespace,
              on_step: Any = None) -> dict[str, Any]:  # fmt: skip
    """Supervised warm start of ``llm`` (in place, full weights) on the expert reader's trajectories over the
    TRAIN documents (:mod:`bench.read_sft`), for ``--sft-minutes`` / ``--sft-steps`` at most; what it did.

    Each answer step is drawn ``--sft-answer-repeat`` times per epoch (answer prompts are a fifth as long as
    chunk prompts, and the answer's format is most of what the reader gets wrong), and every example runs
    in a forward pass of its own (no padding: an answer costs its own length, not a chunk's); under
    ``--sft-autocast bf16`` in mixed precision. ``on_step``: called with each step's metrics row."""
    from memrl.agents.read_expert import expert_trajectories
    from memrl.eval.qa.config import QAEvalConfig, load_conversations
    from memrl.train.sft import SFTConfig, SFTTrainer, epochs_for, sft_samples

    # where the expert looks up each document's question: every training conversation (bench/read_sft.py
    # trains on all seven); the documents it trains on are the caller's
    convs = {c.id: c for c in load_conversations(QAEvalConfig(dataset="locomo", split="train"))}
    trajs, counts = asyncio.run(expert_trajectories(llm, list(train_docs), convs, config))
    budget = max(config.memory_tokens, config.answer_tokens)
    parts = {}
    for kind, keep in (("chunk", True), ("answer", False)):
        only = [dataclasses.replace(t, steps=[x for x in t.steps if x.role.startswith("chunk") is keep])
                for t in trajs]  # fmt: skip
        parts[kind] = sft_samples(llm, only, max_reply_tokens=budget)
    samples = parts["chunk"][0] + parts["answer"][0] * args.sft_answer_repeat
    skipped = {k: parts["chunk"][1][k] + parts["answer"][1][k] for k in parts["chunk"][1]}
    trainer = SFTTrainer(llm, SFTConfig(lr=args.sft_lr, epochs=epochs_for(args.sft_epochs, args.sft_minutes), batch_size=args.sft_batch,
                                        micro_batch=1, seed=args.seed, save_every=10**6,
                                        autocast=args.sft_autocast))  # fmt: skip
    rows = trainer.fit(samples, args.out / "sft", progress=not args.quiet, max_steps=args.sft_steps or None,
                       time_limit_s=60 * args.sft_minutes or None, on_step=on_step)  # fmt: skip
    return {
        **counts,
        "chunk_examples": len(parts["chunk"][0]),
        "answer_examples": len(parts["answer"][0]),
        "answer_repeat": args.sft_answer_repeat,
        "skipped": skipped,
        "steps": len(rows),
        "examples_seen": min(len(samples), len(rows) * args.sft_batch),
        "lr": args.sft_lr,
        "autocast": args.sft_autocast,
        "loss_first": rows[0]["loss"] if rows else None,
        "loss_last": rows[-1]["loss"] if rows else None,
    }


def cached_before(args: argparse.Namespace, llm: Any, docs: Sequence[Any], items: Sequence[Any],
                  config: Any) -> tuple[list[dict[str, Any]], str | None, float]:  # fmt: skip
    """The untrained model's greedy evaluation, or the one in ``--before-cache`` when it was made with the
    same model, reading settings and items (greedy decoding of the same model is the same whatever the
    training seed; the file says which run made it)."""
    import hashlib
    import json
    from pathlib import Path

    setting = [
        args.model,
        dataclasses.asdict(config),
        [it.id for it in items],
        [d.metadata["context"] for d in docs],
    ]
    if args.eval_bf16:  # the key of an fp32 evaluation is the one earlier runs wrote
        setting.append("prefill_bf16")
    key = hashlib.sha256(json.dumps(setting).encode()).hexdigest()
    path = Path(args.before_cache) if args.before_cache else None
    if path is not None and path.is_file():
        saved = json.loads(path.read_text())
        if saved["key"] == key:
            return saved["rows"], saved["made_by"], saved["seconds"]
    t = time.perf_counter()
    rows = evaluate(llm, docs, items, config, prefill_bf16=args.eval_bf16)
    seconds = time.perf_counter() - t
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"key": key, "made_by": str(args.out), "seconds": seconds, "rows": rows}))
    return rows, None, seconds


def data_and_rules(args: argparse.Namespace) -> tuple[list, list, list, Any, dict[str, list[dict[str, Any]]]]:
    """Train documents, held-out documents and their items, the rules fitted on train items, and the rules'
    scored predictions on the held-out items."""
    from bench.learning_baselines import document_item
    from memrl.eval.protocol import TRAIN_SPLIT

    train_docs = documents(TRAIN_SPLIT, args.length)
    eval_docs = stratified(documents(args.eval_split, args.length), args.eval_items or None)
    items = [document_item(d) for d in eval_docs]
    rules, trivial = rules_on(train_docs, items)
    return train_docs, eval_docs, items, rules, trivial


def rules_on(train_docs: Sequence[Any], items: Sequence[Any]) -> tuple[Any, dict[str, list[dict[str, Any]]]]:
    """The no-model rules fitted on ``train_docs``' items, and their scored predictions on ``items``."""
    from bench.learning_baselines import Baselines, document_item, score_prediction

    rules = Baselines.fit([document_item(d) for d in train_docs])
    trivial = {name: [{"prediction": p, **score_prediction(p, it)} for p, it in zip(preds, items, strict=True)]
               for name, preds in rules.predict(items).items()}  # fmt: skip
    return rules, trivial


def baselines_only(args: argparse.Namespace, t0: float) -> dict[str, Any]:
    """The no-model rules on the held-out documents (``--baselines-only``): predictions as JSONL, F1 / EM."""
    from bench import learning_report as report

    _, eval_docs, items, rules, trivial = data_and_rules(args)
    found = {f"top{k}": bm25_finds_evidence(eval_docs, items, k) for k in (1, 3)}
    return report.rules_report("read", items, trivial, rules, args.out, t0, length=args.length,
                               bm25_evidence=found)  # fmt: skip


def before_only(args: argparse.Namespace, t0: float) -> dict[str, Any]:
    """The untrained model's evaluation alone (``--before-only``), written to ``--before-cache``."""
    from bench import learning_report as report
    from memrl.llm.local import LocalLLM

    _, eval_docs, items, _, _ = data_and_rules(args)
    llm = LocalLLM(
        args.model, max_batch_size=args.batch, threads=args.threads, device=getattr(args, "device", "cpu")
    ).load()
    rows, reused, seconds = cached_before(args, llm, eval_docs, items, reader_config(args))
    return {"task": "read", "before_only": True, "n_eval": len(items), "before": round(report.mean(rows, "f1"), 2),
            "before_em": round(report.mean(rows, "em"), 2), "cache": args.before_cache, "reused_from": reused,
            "eval_s": round(seconds, 1), "wall_time_s": round(time.perf_counter() - t0, 1)}  # fmt: skip


def grpo_configs(args: argparse.Namespace) -> tuple[Any, Any]:
    """The GRPO loop's and trainer's settings of a read run (LoRA by default), from the benchmark's arguments."""
    from memrl.train.loop import LoopConfig
    from memrl.train.trainer import TrainerConfig

    loop = LoopConfig(steps=args.steps, group_size=args.group_size, tasks_per_step=args.tasks_per_step,
                      temperature=args.temperature, save_every=10**6, seed=args.seed,
                      output_dir=str(args.out / "train"))  # fmt: skip
    trainer = TrainerConfig(lr=args.lr, lora_rank=args.lora_rank, kl_coef=args.kl_coef, micro_batch=args.micro_batch,
                            micro_tokens=args.micro_tokens, max_grad_norm=args.max_grad_norm)  # fmt: skip
    return loop, trainer


def grpo_and_score(llm: Any, tasks: Any, args: argparse.Namespace, left_s: float, timings: dict[str, float],
                   after_sft: list[dict[str, Any]] | None, score: Any) -> tuple[list[dict], list[dict[str, Any]]]:  # fmt: skip
    """GRPO for ``left_s`` seconds (``--steps 0``: none, the SFT-only control given the whole budget through
    ``--sft-minutes``), then the final model's rows by ``score()``; a run that made no GRPO step ends with the
    SFT model, already scored as ``after_sft``. Fills ``train_s`` and ``eval_after_s`` of ``timings``; returns the
    training rows and the final rows (the read task of both benchmarks: RULER-LoCoMo and ``--ruler-task``)."""
    from memrl.train.loop import train

    t = time.perf_counter()
    rows: list[dict] = []
    if args.steps:
        loop, trainer = grpo_configs(args)
        rows = train(llm, tasks, loop, trainer, progress=not args.quiet, time_limit_s=max(0.0, left_s))
    timings["train_s"] = time.perf_counter() - t
    t = time.perf_counter()
    after = after_sft if not rows and after_sft is not None else score()
    timings["eval_after_s"] = time.perf_counter() - t
    return rows, after


def run(args: argparse.Namespace, t0: float) -> dict[str, Any]:
    """Baselines, before, training, after (see the module docstring); returns the result's parts."""
    from memrl.llm.local import LocalLLM
    from memrl.train.tasks import ReadTasks

    timings: dict[str, float] = {}
    t = time.perf_counter()
    train_docs, eval_docs, items, rules, trivial = data_and_rules(args)
    timings["data_and_baselines_s"] = time.perf_counter() - t

    llm = LocalLLM(
        args.model, max_batch_size=args.batch, threads=args.threads, device=getattr(args, "device", "cpu")
    ).load()
    tok = llm.tokenizer
    doc_tokens = [len(tok.encode(d.metadata["context"])) for d in eval_docs]
    config = reader_config(args)
    t = time.perf_counter()
    before, reused, eval_s = cached_before(args, llm, eval_docs, items, config)
    timings["eval_before_s"] = time.perf_counter() - t

    extra: dict[str, Any] = {}
    if args.sft_steps or args.sft_minutes:
        t = time.perf_counter()
        extra["sft"] = sft_stage(llm, train_docs, config, args)
        timings["sft_s"] = time.perf_counter() - t
        t = time.perf_counter()  # the SFT model alone, so that RL's own effect can be told from SFT's
        extra["after_sft"] = evaluate(llm, eval_docs, items, config, prefill_bf16=args.eval_bf16)
        timings["eval_after_sft_s"] = time.perf_counter() - t
    tasks = ReadTasks(train_docs, config, reward=args.reward)
    # what is left of the budget, less the evaluation after training (as long as the one before) and a
    # margin for the last step and the report
    # the evaluation after training takes about as long as the one before: measured 640 s before and 751 s
    # after on the same 96 documents (longer memories), so a quarter more is kept for it
    eval_s = args.eval_estimate_s or 1.25 * eval_s
    left = args.budget_minutes * 60 - (time.perf_counter() - t0) - eval_s - args.margin_s
    rows, after = grpo_and_score(
        llm, tasks, args, left, timings, extra.get("after_sft"),
        lambda: evaluate(llm, eval_docs, items, config, prefill_bf16=args.eval_bf16),
    )  # fmt: skip
    setting = {"length": args.length, "chunk_tokens": args.chunk_tokens, "memory_tokens": args.memory_tokens,
               "eval_prefill": "bf16" if args.eval_bf16 else "fp32",
               "answer_tokens": args.answer_tokens, "reward": args.reward, "memory_last": not args.memory_first,
               "doc_tokens_mean": round(sum(doc_tokens) / len(doc_tokens), 1),
               "n_train_items": len(train_docs), "top1_text_chars": rules.n_chars, "before_reused_from": reused,
               "rule_per_category": {str(c): r for c, r in sorted(rules.by_category.items())},
               "most_frequent": {str(k): v for k, v in sorted(rules.frequent.items())}}  # fmt: skip
    extra["evidence"] = {name: evidence_summary(r) for name, r in (("before", before), ("after", after))}
    return {"items": items, "before": before, "after": after, "trivial": trivial, "rows": rows,
            "timings": timings, "setting": setting, **extra}  # fmt: skip


def evidence_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """How much of the questions' evidence the final memories hold: the mean share of its content words,
    and the share of memories holding at least half (rows of an older cache may not say: n counts those that do)."""
    found = [r["evidence_in_memory"] for r in rows if r.get("evidence_in_memory") is not None]
    if not found:
        return {"n": 0}
    return {"n": len(found), "mean": round(sum(found) / len(found), 3),
            "at_least_half": round(sum(x >= 0.5 for x in found) / len(found), 3)}  # fmt: skip
