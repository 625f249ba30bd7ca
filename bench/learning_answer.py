"""The ``answer`` task of the learning benchmark: questions answered from the top-k memories of a ``raw``
store, trained with ``memrl train grpo --task answer`` (LoRA), optionally after SFT on the gold answers.

Training: the questions of LoCoMo's *fit* conversations (the protocol's part of MemUpdate's 7 train
conversations), the prompts of
:class:`memrl.train.tasks.AnswerTasks` (reward: the training F1, every extra list part charged); the SFT
stage (``--sft-steps``/``--sft-minutes``, :class:`~memrl.train.sft.SFTTrainer`) uses the same prompts
answered with the gold short answer. Evaluation: every category 1-4 question of the *validation* (or, with
``--eval-split test``, the three *test*) conversations (``--eval-questions N``: the first N of each), by ``memrl eval``'s own code
(:class:`QAEvaluation`, ``--mode answer`` on the raw store, the same ``--top-k`` and answer budget as in
training, greedy), in a fresh process per evaluation: the model is loaded before any embedder (loading
models from several threads at once, as the evaluation's concurrent searches do with the embedder, can
corrupt transformers' loading state for the models loaded after it in the same process).

Trivial baselines (:mod:`bench.learning_baselines`) on the same questions look at the same retrieval: the
top-1 retrieved memory of the same store, ``--top-k`` and search settings (memrl's defaults).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: The repository root: the folder ``python -m bench.NAME`` runs from.
ROOT = Path(__file__).resolve().parents[1]


def evaluate(out: Path, model: str | None, args: argparse.Namespace) -> dict:
    """memrl eval's QA evaluation of ``model`` in a fresh process (see the module docstring)."""
    # ``python -m bench.learning`` from the repository root (where ``bench`` is a package), whatever this
    # process's folder: the paths it is given are made absolute first
    model = model or args.model
    if model and Path(model).exists():
        model = str(Path(model).resolve())
    cmd = [sys.executable, "-m", "bench.learning", "--task", "answer", "--eval-only",
           str(Path(out).resolve()), "--out", str(Path(args.out).resolve()), "--top-k", str(args.top_k),
           "--answer-tokens", str(args.answer_tokens), "--embedder", args.embedder, "--eval-split", args.eval_split]  # fmt: skip
    if model:
        cmd += ["--eval-model", model]
    if args.eval_questions:
        cmd += ["--eval-questions", str(args.eval_questions)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    return json.loads((out / "summary.json").read_text())


def eval_only(args: argparse.Namespace) -> None:
    from memrl.eval.qa import QAEvaluation
    from memrl.eval.qa.config import QAEvalConfig
    from memrl.llm.local import LocalLLM

    llm = LocalLLM(args.eval_model, max_batch_size=16, device=getattr(args, "device", "cpu")).load()
    cfg = QAEvalConfig(
        dataset="locomo", split=args.eval_split, mode="answer", builder="raw", provider="local", model=args.eval_model,
        db_path=str(args.out / "memory.db"), top_k=args.top_k, max_answer_tokens=args.answer_tokens,
        questions=args.eval_questions, concurrency=16, output_dir=str(args.eval_only), overwrite=True,
        cache=False, embedder=args.embedder,
    )  # fmt: skip
    asyncio.run(QAEvaluation(cfg, llm=llm, progress=False).run())


def rows_of(folder: Path, items: list) -> list[dict[str, Any]]:
    """memrl eval's predictions in the order of ``items``, scored as the baselines are."""
    from bench.learning_baselines import score_prediction

    got = {
        r["question_id"]: r for r in map(json.loads, (folder / "predictions.jsonl").read_text().splitlines())
    }
    missing = [it.id for it in items if it.id not in got]
    if missing:
        raise SystemExit(f"{folder}: no prediction for {len(missing)} questions ({', '.join(missing[:3])})")
    return [{"prediction": got[it.id]["prediction"] or "", **score_prediction(got[it.id]["prediction"] or "", it)}
            for it in items]  # fmt: skip


def retrieval_items(db: Path, convs: list, top_k: int, embedder: str = "minilm") -> list:
    """Each question with its top-k memories (the store and search the model answers from), as baseline
    items. Searches run one at a time, before any model is loaded in this process."""
    from bench.learning_baselines import Candidate, Item, _day_of
    from memrl.memory.facade.memory import AsyncMemory
    from memrl.scoring.answer import memory_date

    async def go() -> list:
        memory = AsyncMemory(str(db), embedder=embedder)
        out = []
        try:
            for conv in convs:
                for q in conv.questions:
                    if not q.answers or q.category_id not in (1, 2, 3, 4):
                        continue
                    hits = await memory.search(q.question, namespace=f"{conv.id}@raw", top_k=top_k)
                    cands = [Candidate(" ".join(str(h.item.metadata.get("text") or h.item.content).split()),
                                       _day_of(memory_date(h)) or _iso_day(memory_date(h))) for h in hits]  # fmt: skip
                    out.append(Item(q.id, q.question, tuple(q.answers), int(q.category_id), cands))
        finally:
            await memory.close()
        return out

    return asyncio.run(go())


def _iso_day(text: str | None) -> Any:
    from datetime import date

    try:
        return date.fromisoformat(str(text)[:10])
    except ValueError:
        return None


def sft_stage(llm, tasks, args: argparse.Namespace, time_limit_s: float | None) -> tuple[list[dict], dict]:
    """Supervised fine-tuning of ``llm`` (in place, full weights) on the training tasks' gold answers: the
    very prompts GRPO samples from (set up already), loss on the answer tokens; answers the answer budget
    would cut are left out. Checkpoint in OUT/sft/checkpoint."""
    from memrl.train.sft import SFTConfig, SFTTrainer, epochs_for, sft_samples

    samples, skipped = sft_samples(llm, tasks.gold_trajectories(), max_reply_tokens=args.answer_tokens)
    trainer = SFTTrainer(llm, SFTConfig(lr=args.sft_lr, epochs=epochs_for(args.sft_epochs, args.sft_minutes), batch_size=args.sft_batch,
                                        micro_batch=args.sft_batch, seed=args.seed, save_every=10**6))  # fmt: skip
    rows = trainer.fit(samples, args.out / "sft", progress=not args.quiet, max_steps=args.sft_steps or None,
                       time_limit_s=time_limit_s)  # fmt: skip
    return rows, {"examples": len(samples), "skipped": skipped, "passes": rows[-1]["epoch"] if rows else 0}


def _store_and_baselines(args: argparse.Namespace, timings: dict[str, float]) -> tuple:
    """The raw store of every conversation, the held-out items with their retrieval, the rules fitted on
    train items and their scored predictions."""
    from bench.learning_baselines import Baselines, score_prediction
    from memrl.eval.protocol import TRAIN_SPLIT
    from memrl.eval.qa import QAEvaluation
    from memrl.eval.qa.config import QAEvalConfig, load_conversations

    t = time.perf_counter()
    for split in (args.eval_split, TRAIN_SPLIT):  # the conversations' turns, by memrl eval's raw builder
        cfg = QAEvalConfig(dataset="locomo", split=split, mode="build", builder="raw",
                           db_path=str(args.out / "memory.db"), output_dir=str(args.out / f"build-{split}"), embedder=args.embedder)  # fmt: skip
        asyncio.run(QAEvaluation(cfg, llm=object(), progress=not args.quiet).run())
    timings["build_store_s"] = time.perf_counter() - t
    t = time.perf_counter()
    test_convs = load_conversations(
        QAEvalConfig(dataset="locomo", split=args.eval_split, questions=args.eval_questions)
    )
    train_convs = load_conversations(
        QAEvalConfig(dataset="locomo", split=TRAIN_SPLIT, questions=args.train_questions)
    )
    items = retrieval_items(args.out / "memory.db", test_convs, args.top_k, args.embedder)
    rules = Baselines.fit(retrieval_items(args.out / "memory.db", train_convs, args.top_k, args.embedder))
    trivial = {name: [{"prediction": p, **score_prediction(p, it)} for p, it in zip(preds, items, strict=True)]
               for name, preds in rules.predict(items).items()}  # fmt: skip
    timings["baselines_s"] = time.perf_counter() - t
    return items, rules, trivial, test_convs, train_convs


def baselines_only(args: argparse.Namespace, t0: float) -> dict[str, Any]:
    """The no-model rules on the held-out questions (``--baselines-only``): their predictions as JSONL and
    their official F1 / EM x100, overall and per category."""
    from bench import learning_report as report

    timings: dict[str, float] = {}
    items, rules, trivial, _, _ = _store_and_baselines(args, timings)
    return report.rules_report("answer", items, trivial, rules, args.out, t0,
                               eval_questions_per_conversation=args.eval_questions, top_k=args.top_k,
                               **{k: round(v, 1) for k, v in timings.items()})  # fmt: skip


def run(args: argparse.Namespace, t0: float) -> dict[str, Any]:
    """Store, baselines, before, (SFT, after SFT,) GRPO, after; returns the result's parts."""
    from memrl.llm.local import LocalLLM
    from memrl.train.loop import LoopConfig, train
    from memrl.train.tasks import AnswerTasks
    from memrl.train.trainer import TrainerConfig

    timings: dict[str, float] = {}
    items, rules, trivial, test_convs, train_convs = _store_and_baselines(args, timings)

    t = time.perf_counter()
    evaluate(args.out / "before", None, args)
    timings["eval_before_s"] = time.perf_counter() - t
    base = LocalLLM(args.model, max_batch_size=16, device=getattr(args, "device", "cpu")).load()
    tasks = AnswerTasks(train_convs, db_path=str(args.out / "memory.db"), top_k=args.top_k,
                        max_tokens=args.answer_tokens, embedder=args.embedder)  # fmt: skip
    asyncio.run(tasks.setup())  # the prompts (retrieval), shared by SFT and GRPO
    extra: dict[str, Any] = {}
    if args.sft_steps or args.sft_minutes:
        t = time.perf_counter()
        sft_rows, extra["sft"] = sft_stage(base, tasks, args, 60 * args.sft_minutes or None)
        extra["sft"].update(steps=len(sft_rows), loss_first=sft_rows[0]["loss"] if sft_rows else None)
        timings["sft_s"] = time.perf_counter() - t
        t = time.perf_counter()
        evaluate(args.out / "after-sft", str(args.out / "sft" / "checkpoint"), args)
        timings["eval_after_sft_s"] = time.perf_counter() - t
        extra["after_sft"] = rows_of(args.out / "after-sft", items)
    left = args.budget_minutes * 60 - (time.perf_counter() - t0) - timings["eval_before_s"] - args.margin_s
    t = time.perf_counter()
    rows: list[dict] = []
    if args.steps:  # --steps 0: no GRPO, the SFT-only control (its time given through --sft-minutes)
        loop = LoopConfig(steps=args.steps, group_size=args.group_size, tasks_per_step=args.tasks_per_step,
                          temperature=args.temperature, save_every=10**6, seed=args.seed, output_dir=str(args.out / "train"))  # fmt: skip
        trainer = TrainerConfig(
            lr=args.lr, lora_rank=args.lora_rank, kl_coef=args.kl_coef, micro_batch=args.group_size
        )
        rows = train(base, tasks, loop, trainer, progress=not args.quiet, time_limit_s=max(0.0, left))
    timings["train_s"] = time.perf_counter() - t
    t = time.perf_counter()
    if rows:
        evaluate(args.out / "after", str(args.out / "train" / "checkpoint"), args)
    else:  # the final model is the SFT model (or the untrained one, if no GRPO step fit), scored already
        shutil.copytree(args.out / ("after-sft" if "after_sft" in extra else "before"), args.out / "after")
    timings["eval_after_s"] = time.perf_counter() - t
    setting = {"top_k": args.top_k, "answer_tokens": args.answer_tokens, "n_train_items": len(tasks),
               "top1_text_chars": rules.n_chars, "most_frequent": {str(k): v for k, v in sorted(rules.frequent.items())}}  # fmt: skip
    return {"items": items, "before": rows_of(args.out / "before", items), "after": rows_of(args.out / "after", items),
            "trivial": trivial, "rows": rows, "timings": timings, "setting": setting, **extra}  # fmt: skip
