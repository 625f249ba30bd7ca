"""The learning benchmark: does memrl's training improve the offline model on questions it never trained on?

SmolLM2-135M-Instruct is trained on the ``answer`` task (``memrl train grpo --task answer``, LoRA) on the
questions of LoCoMo's *train* conversations (MemUpdate's 7/3 split), optionally after a supervised stage
(``--sft-steps``/``--sft-minutes``: memrl's :class:`~memrl.train.sft.SFTTrainer` on the same prompts - the
question and the same top-k retrieved memories - answered with the gold short answer, loss on the answer
tokens only; train conversations only). It is evaluated before, after SFT and after GRPO on every question
(categories 1-4, or the first ``--eval-questions`` of each) of the three *test* conversations, by
``memrl eval``'s own code (:class:`QAEvaluation`, ``--mode answer`` on a store the ``raw`` builder filled,
the same ``--top-k`` and answer budget as in training, greedy answers, same seed). The metric is LoCoMo's
official F1; the report also gives what an empty answer and a copy of the question would score on the same
items, and how many answers were empty or copies, so a trick cannot pass for learning. Everything (store
build, the evaluations, training) counts in ``wall_time_s``.

    .venv/bin/python bench/learning.py --out runs/learning-sft --sft-minutes 5   # the README's figures
    .venv/bin/python bench/learning.py --steps 2 --sft-steps 2 --eval-questions 10   # a quick check

Writes OUT/before/, OUT/after-sft/, OUT/after/ (memrl eval's reports), OUT/sft/ (sft_metrics.jsonl,
checkpoint/), OUT/train/ (metrics.jsonl, TensorBoard, checkpoint/), OUT/learning.png (SFT loss, GRPO reward
curve, held-out F1 with 95% intervals), OUT/learning.md (tables) and OUT/learning.json; the last line of
stdout is that JSON object. Paired differences (per question, bootstrap 95% CI) are given for
before -> after SFT, after SFT -> after GRPO and before -> after GRPO; ``significant`` is the issue's
criterion (the two intervals do not overlap), ``paired_significant`` the paired CI excluding 0.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path


def evaluate(out: Path, model: str | None, args: argparse.Namespace) -> dict:
    """memrl eval's QA evaluation (``--mode answer`` on the raw store) of ``model``, in a fresh process:
    the model is loaded first, before any embedder (loading models from several threads at once, as the
    evaluation's concurrent searches do with the embedder, can corrupt transformers' loading state for
    the models loaded after it in the same process)."""
    import subprocess
    import sys

    cmd = [sys.executable, __file__, "--eval-only", str(out), "--out", str(args.out), "--top-k", str(args.top_k),
           "--answer-tokens", str(args.answer_tokens)]  # fmt: skip
    if model:
        cmd += ["--eval-model", model]
    if args.eval_questions:
        cmd += ["--eval-questions", str(args.eval_questions)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads((out / "summary.json").read_text())


def eval_only(args: argparse.Namespace) -> None:
    import asyncio

    from memrl.eval.qa import QAEvaluation
    from memrl.eval.qa_config import QAEvalConfig
    from memrl.llm.local import LocalLLM

    llm = LocalLLM(args.eval_model, max_batch_size=16).load()
    cfg = QAEvalConfig(
        dataset="locomo", split="test", mode="answer", builder="raw", provider="local", model=args.eval_model,
        db_path=str(args.out / "memory.db"), top_k=args.top_k, max_answer_tokens=args.answer_tokens,
        questions=args.eval_questions, concurrency=16, output_dir=str(args.eval_only), overwrite=True,
        cache=False,
    )  # fmt: skip
    asyncio.run(QAEvaluation(cfg, llm=llm, progress=False).run())


def predictions(folder: Path) -> dict[str, dict]:
    return {
        r["question_id"]: r for r in map(json.loads, (folder / "predictions.jsonl").read_text().splitlines())
    }


def _norm(text: str) -> str:
    return " ".join("".join(ch for ch in text.lower() if ch.isalnum() or ch.isspace()).split())


def guard(folder: Path, answer_tokens: int) -> dict:
    """How many held-out answers were empty, or a copy of the question (a trick the metric must not reward)."""
    rows = list(predictions(folder).values())
    empty = [r for r in rows if not (r["prediction"] or "").strip()]
    copies = [
        r for r in rows if _norm(r["prediction"] or "") and _norm(r["prediction"]) == _norm(r["question"])
    ]
    return {"n": len(rows), "n_empty": len(empty), "n_copy_question": len(copies),
            "f1_of_empty": round(100 * sum(r["f1"] for r in empty) / max(1, len(empty)), 2),
            "answers_cut": sum(r["completion_tokens"] >= answer_tokens for r in rows)}  # fmt: skip


def trick_baselines(eval_questions: int | None) -> dict:
    """What an empty answer and a copy of the question score, by memrl eval's ``score``, on the held-out items."""
    from memrl.eval.qa_config import QAEvalConfig, load_conversations
    from memrl.scoring.metrics import score
    from memrl.train.tasks import _questions

    items = _questions(
        load_conversations(QAEvalConfig(dataset="locomo", split="test", questions=eval_questions))
    )
    mean = lambda pred: round(100 * sum(score(c, q, pred(q))["f1"] for c, q in items) / len(items), 2)  # noqa: E731
    return {"n": len(items), "empty": mean(lambda q: ""), "copy_question": mean(lambda q: q.question)}


def paired(a: Path, b: Path) -> dict:
    """Per-question F1 difference b - a (x100) with its bootstrap 95% CI (same items, matched by id)."""
    from memrl.eval.stats import bootstrap_ci

    pa, pb = predictions(a), predictions(b)
    if set(pa) != set(pb):
        raise SystemExit(f"{a} and {b} evaluated different questions; cannot pair them")
    mean, lo, hi = bootstrap_ci([100 * (pb[k]["f1"] - pa[k]["f1"]) for k in sorted(pa)], n_resamples=10000)
    return {
        "diff": round(mean, 2),
        "ci": [round(lo, 2), round(hi, 2)],
        "paired_significant": bool(lo > 0 or hi < 0),
    }


def overlap_free(a: dict, b: dict) -> bool:
    return bool(b["f1_ci"][0] > a["f1_ci"][1] or b["f1_ci"][1] < a["f1_ci"][0])


def point(s: dict) -> dict:
    return {"f1": round(100 * s["f1"], 2), "ci": [round(100 * x, 2) for x in s["f1_ci"]], "n": s["n_answered"],
            "format_errors": s["n_format_errors"],
            "by_category": {c["category"]: {"n": c["n"], "f1": round(100 * c["mean"], 2),
                                            "ci": [round(100 * c["ci_low"], 2), round(100 * c["ci_high"], 2)]}
                            for c in s["f1_by_category"]}}  # fmt: skip


def plot(path: Path, sft_rows: list[dict], rows: list[dict], evals: dict[str, dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 3 if sft_rows else 2
    fig, axes = plt.subplots(1, panels, figsize=(3.6 * panels + 1, 3.4),
                             gridspec_kw={"width_ratios": [2] * (panels - 1) + [1.4]})  # fmt: skip
    if sft_rows:
        ax = axes[0]
        ax.plot([r["step"] for r in sft_rows], [r["loss"] for r in sft_rows], color="C4")
        ax.set_xlabel("SFT step")
        ax.set_ylabel("NLL per answer token")
        ax.set_title("SFT on gold answers (train split)")
    a, b = axes[-2], axes[-1]
    if rows:
        steps = [r["step"] for r in rows]
        a.plot(steps, [100 * r["reward_mean"] for r in rows], color="#999", lw=0.8, label="per step")
        k = 5
        smooth = [100 * sum(r["reward_mean"] for r in rows[max(0, i - k + 1) : i + 1]) / len(rows[max(0, i - k + 1) : i + 1])
                  for i in range(len(rows))]  # fmt: skip
        a.plot(steps, smooth, color="C0", lw=2, label=f"mean of last {k}")
        a.legend(fontsize=8)
    a.set_xlabel("GRPO step")
    a.set_ylabel("training reward (F1 x 100)")
    a.set_title("GRPO reward on training questions")
    for x, s in enumerate(evals.values()):
        f1, (lo, hi) = 100 * s["f1"], (100 * v for v in s["f1_ci"])
        b.errorbar([x], [f1], yerr=[[f1 - lo], [hi - f1]], fmt="o", capsize=6, color=f"C{x + 1}")
    b.set_xticks(range(len(evals)), [k.replace(" ", "\n") for k in evals])
    b.set_xlim(-0.6, len(evals) - 0.4)
    b.set_ylabel("held-out F1 (95% CI)")
    b.set_title(f"test split, n={next(iter(evals.values()))['n_answered']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def sft_stage(llm, tasks, args: argparse.Namespace, time_limit_s: float | None) -> tuple[list[dict], dict]:
    """Supervised fine-tuning of ``llm`` (in place, full weights) on the training tasks' gold answers: the
    very prompts GRPO samples from (set up already), loss on the answer tokens; answers the answer budget
    would cut are left out. Checkpoint in OUT/sft/checkpoint."""
    from memrl.train.sft import SFTConfig, SFTTrainer, sft_samples

    samples, skipped = sft_samples(llm, tasks.gold_trajectories(), max_reply_tokens=args.answer_tokens)
    trainer = SFTTrainer(llm, SFTConfig(lr=args.sft_lr, epochs=args.sft_epochs, batch_size=args.sft_batch,
                                        micro_batch=args.sft_batch, seed=args.seed, save_every=10**6))  # fmt: skip
    rows = trainer.fit(samples, args.out / "sft", progress=not args.quiet, max_steps=args.sft_steps or None,
                       time_limit_s=time_limit_s)  # fmt: skip
    return rows, {"examples": len(samples), "skipped": skipped}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/learning"))
    ap.add_argument(
        "--steps", type=int, default=200, help="at most this many GRPO steps (the time budget decides)"
    )
    ap.add_argument("--budget-minutes", type=float, default=29.0, help="the whole benchmark's time budget")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--tasks-per-step", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=0.7, help="GRPO rollout temperature")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--lora-rank", type=int, default=16, help="0 = full fine-tuning")
    ap.add_argument("--kl-coef", type=float, default=0.0)
    ap.add_argument("--loss-agg", default="token-mean")
    ap.add_argument("--top-k", type=int, default=3, help="memories per question, in training and evaluation")
    ap.add_argument("--answer-tokens", type=int, default=16, help="answer budget, in training and evaluation")
    ap.add_argument("--eval-questions", type=int, default=50, help="at most this many per test conversation")
    ap.add_argument("--train-questions", type=int, help="at most this many per train conversation")
    ap.add_argument(
        "--sft-steps", type=int, default=0, help="SFT optimizer steps before GRPO (0: no step cap)"
    )
    ap.add_argument("--sft-minutes", type=float, default=0.0, help="SFT time budget before GRPO (0: none)")
    ap.add_argument("--sft-lr", type=float, default=5e-5, help="SFT learning rate (full fine-tuning)")
    ap.add_argument("--sft-batch", type=int, default=8, help="SFT examples per optimizer step")
    ap.add_argument("--sft-epochs", type=int, default=1, help="SFT passes over the examples (at most)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument(
        "--eval-only", type=Path, help=argparse.SUPPRESS
    )  # internal: one evaluation, see evaluate()
    ap.add_argument("--eval-model", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if min(args.sft_steps, args.sft_minutes, args.steps) < 0 or args.sft_lr <= 0 or args.sft_batch < 1:
        ap.error("--steps, --sft-steps and --sft-minutes must be >= 0, --sft-lr > 0, --sft-batch >= 1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("MEMRL_DATA_DIR", str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    if args.eval_only:
        return eval_only(args)
    import asyncio

    from memrl.eval.qa import QAEvaluation
    from memrl.eval.qa_config import QAEvalConfig, load_conversations
    from memrl.llm.local import LocalLLM
    from memrl.train.loop import LoopConfig, train
    from memrl.train.tasks import AnswerTasks
    from memrl.train.trainer import TrainerConfig

    t0 = time.perf_counter()
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    timings: dict[str, float] = {}
    sft_on = bool(args.sft_steps or args.sft_minutes)

    # the store: every conversation's turns, by memrl eval's raw builder (test and train namespaces)
    t = time.perf_counter()
    for split in ("test", "train"):
        cfg = QAEvalConfig(dataset="locomo", split=split, mode="build", builder="raw",
                           db_path=str(args.out / "memory.db"), output_dir=str(args.out / f"build-{split}"))  # fmt: skip
        asyncio.run(QAEvaluation(cfg, llm=object(), progress=not args.quiet).run())
    timings["build_store_s"] = time.perf_counter() - t

    t = time.perf_counter()
    evals = {"before": evaluate(args.out / "before", None, args)}
    timings["eval_before_s"] = time.perf_counter() - t
    base = LocalLLM(max_batch_size=16).load()

    train_convs = load_conversations(
        QAEvalConfig(dataset="locomo", split="train", questions=args.train_questions)
    )
    tasks = AnswerTasks(train_convs, db_path=str(args.out / "memory.db"), top_k=args.top_k,
                        max_tokens=args.answer_tokens)  # fmt: skip
    t = time.perf_counter()
    asyncio.run(tasks.setup())  # the prompts (retrieval), shared by SFT and GRPO
    timings["prompts_s"] = time.perf_counter() - t

    sft_rows: list[dict] = []
    sft_info: dict = {}
    if sft_on:
        t = time.perf_counter()
        sft_rows, sft_info = sft_stage(base, tasks, args, 60 * args.sft_minutes or None)
        timings["sft_s"] = time.perf_counter() - t
        t = time.perf_counter()
        evals["after SFT"] = evaluate(args.out / "after-sft", str(args.out / "sft" / "checkpoint"), args)
        timings["eval_after_sft_s"] = time.perf_counter() - t

    loop = LoopConfig(steps=args.steps, group_size=args.group_size, tasks_per_step=args.tasks_per_step,
                      temperature=args.temperature, save_every=10, seed=args.seed,
                      output_dir=str(args.out / "train"))  # fmt: skip
    trainer = TrainerConfig(lr=args.lr, lora_rank=args.lora_rank, kl_coef=args.kl_coef, loss_agg=args.loss_agg,
                            micro_batch=args.group_size)  # fmt: skip
    t = time.perf_counter()
    # what is left of the budget, less the evaluation after training (as long as the one before) and a
    # margin for the last step, the checkpoint and loading it
    left = args.budget_minutes * 60 - (time.perf_counter() - t0) - timings["eval_before_s"] - 90
    rows = (
        train(base, tasks, loop, trainer, progress=not args.quiet, time_limit_s=max(0.0, left))
        if args.steps
        else []
    )
    timings["train_s"] = time.perf_counter() - t

    t = time.perf_counter()
    if rows:
        evals["after GRPO"] = evaluate(args.out / "after", str(args.out / "train" / "checkpoint"), args)
    timings["eval_after_s"] = time.perf_counter() - t

    plot(args.out / "learning.png", sft_rows, rows, evals)
    dirs = {
        "before": args.out / "before",
        "after SFT": args.out / "after-sft",
        "after GRPO": args.out / "after",
    }
    names = list(evals)
    pairs = {f"{a} -> {b}": {**paired(dirs[a], dirs[b]), "significant": overlap_free(evals[a], evals[b])}
             for i, a in enumerate(names) for b in names[i + 1 :]}  # fmt: skip
    last = evals[names[-1]]
    result = {
        "task": "answer", "model": "SmolLM2-135M-Instruct", "train": "LoCoMo train split (7 conversations)",
        "eval": "LoCoMo test split (conv-43, conv-26, conv-30), categories 1-4",
        "metric": "LoCoMo F1 (x100), memrl eval --mode answer",
        "before": round(100 * evals["before"]["f1"], 2),
        "before_ci": [round(100 * x, 2) for x in evals["before"]["f1_ci"]],
        "after": round(100 * last["f1"], 2), "after_ci": [round(100 * x, 2) for x in last["f1_ci"]],
        "significant": overlap_free(evals["before"], last),
        "evals": {k: point(v) for k, v in evals.items()}, "paired": pairs,
        "guards": {k: guard(dirs[k], args.answer_tokens) for k in evals}, "trick_baselines": trick_baselines(args.eval_questions),
        "n_eval": last["n_answered"], "n_train_questions": len(tasks),
        "sft": {"steps": len(sft_rows), "batch": args.sft_batch, "lr": args.sft_lr, **sft_info,
                "loss_first": sft_rows[0]["loss"] if sft_rows else None,
                "loss_last5": round(sum(r["loss"] for r in sft_rows[-5:]) / max(1, len(sft_rows[-5:])), 4)} if sft_on else None,
        "steps": len(rows), "group_size": args.group_size, "tasks_per_step": args.tasks_per_step, "lr": args.lr,
        "lora_rank": args.lora_rank, "top_k": args.top_k, "answer_tokens": args.answer_tokens,
        "temperature": args.temperature, "kl_coef": args.kl_coef,
        "train_reward_first5": round(sum(r["reward_mean"] for r in rows[:5]) / max(1, min(5, len(rows))), 4),
        "train_reward_last5": round(sum(r["reward_mean"] for r in rows[-5:]) / max(1, min(5, len(rows))), 4),
        **{k: round(v, 1) for k, v in timings.items()},
        "wall_time_s": round(time.perf_counter() - t0, 1),
        "curve": str(args.out / "learning.png"),
    }  # fmt: skip
    (args.out / "learning.json").write_text(json.dumps(result, indent=2))
    (args.out / "learning.md").write_text(report(result))
    print(json.dumps(result))


def report(r: dict) -> str:
    """The README's tables: each evaluation by category, and the paired differences."""
    cats = list(next(iter(r["evals"].values()))["by_category"])
    lines = ["| evaluation | " + " | ".join(cats) + " |", "|---|" + "---:|" * len(cats)]
    for name, e in r["evals"].items():
        cells = [f"{c['f1']:.2f} ({c['ci'][0]:.2f}-{c['ci'][1]:.2f})" for c in e["by_category"].values()]
        lines.append(f"| {name} (n={e['n']}) | " + " | ".join(cells) + " |")
    lines += ["", "| comparison | paired F1 diff (95% CI) | paired CI excludes 0 | CIs do not overlap |",
              "|---|---:|---|---|"]  # fmt: skip
    for name, p in r["paired"].items():
        lines.append(f"| {name} | {p['diff']:+.2f} ({p['ci'][0]:+.2f}..{p['ci'][1]:+.2f}) | "
                     f"{p['paired_significant']} | {p['significant']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
