"""The learning benchmark: does memrl's GRPO improve the offline model on questions it never trained on?

SmolLM2-135M-Instruct is trained with ``memrl train grpo --task answer`` (LoRA) on the questions of
LoCoMo's *train* conversations (MemUpdate's 7/3 split) and evaluated before and after on every question
(categories 1-4) of the three *test* conversations, by ``memrl eval``'s own code (:class:`QAEvaluation`,
``--mode answer`` on a store the ``raw`` builder filled, the same ``--top-k`` and answer budget as in
training, greedy answers). The metric is LoCoMo's official F1, which neither an empty answer nor a copy of
the question can raise. Everything (store build, both evaluations, training) counts in ``wall_time_s``.

    .venv/bin/python bench/learning.py --out runs/learning          # the README's figures
    .venv/bin/python bench/learning.py --steps 2 --eval-questions 10   # a quick check of the pipeline

Writes OUT/before/ and OUT/after/ (memrl eval's reports), OUT/train/ (metrics.jsonl, TensorBoard,
reward.png, checkpoint/), OUT/learning.png (the reward curve and the before/after F1 with 95% intervals)
and OUT/learning.json; the last line of stdout is that JSON object.
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

    from memrl.eval.qa import QAEvalConfig, QAEvaluation
    from memrl.llm.local import LocalLLM

    llm = LocalLLM(args.eval_model, max_batch_size=16).load()
    cfg = QAEvalConfig(
        dataset="locomo", split="test", mode="answer", builder="raw", provider="local", model=args.eval_model,
        db_path=str(args.out / "memory.db"), top_k=args.top_k, max_answer_tokens=args.answer_tokens,
        questions=args.eval_questions, concurrency=16, output_dir=str(args.eval_only), overwrite=True,
        cache=False,
    )  # fmt: skip
    asyncio.run(QAEvaluation(cfg, llm=llm, progress=False).run())


def plot(path: Path, rows: list[dict], before: dict, after: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4), gridspec_kw={"width_ratios": [3, 1]})
    steps = [r["step"] for r in rows]
    a.plot(steps, [100 * r["reward_mean"] for r in rows], color="#999", lw=0.8, label="per step")
    k = 5
    smooth = [100 * sum(r["reward_mean"] for r in rows[max(0, i - k + 1) : i + 1]) / len(rows[max(0, i - k + 1) : i + 1])
              for i in range(len(rows))]  # fmt: skip
    a.plot(steps, smooth, color="C0", lw=2, label=f"mean of last {k}")
    a.set_xlabel("GRPO step")
    a.set_ylabel("training reward (F1 x 100)")
    a.set_title("reward on training questions")
    a.legend(fontsize=8)
    for x, s in enumerate((before, after)):
        f1, (lo, hi) = 100 * s["f1"], (100 * v for v in s["f1_ci"])
        b.errorbar([x], [f1], yerr=[[f1 - lo], [hi - f1]], fmt="o", capsize=6, color=f"C{x + 1}")
    b.set_xticks([0, 1], ["before", "after"])
    b.set_xlim(-0.6, 1.6)
    b.set_ylabel("held-out F1 (95% CI)")
    b.set_title(f"test split, n={after['n_answered']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/learning"))
    ap.add_argument(
        "--steps", type=int, default=200, help="at most this many steps (the time budget decides)"
    )
    ap.add_argument("--budget-minutes", type=float, default=29.0, help="the whole benchmark's time budget")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--tasks-per-step", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--lora-rank", type=int, default=16, help="0 = full fine-tuning")
    ap.add_argument("--kl-coef", type=float, default=0.0)
    ap.add_argument("--loss-agg", default="token-mean")
    ap.add_argument("--top-k", type=int, default=5, help="memories per question, in training and evaluation")
    ap.add_argument("--answer-tokens", type=int, default=24, help="answer budget, in training and evaluation")
    ap.add_argument("--eval-questions", type=int, help="at most this many questions per test conversation")
    ap.add_argument("--train-questions", type=int, help="at most this many per train conversation")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument(
        "--eval-only", type=Path, help=argparse.SUPPRESS
    )  # internal: one evaluation, see evaluate()
    ap.add_argument("--eval-model", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("MEMRL_DATA_DIR", str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    if args.eval_only:
        return eval_only(args)
    from memrl.eval.qa import QAEvalConfig, load_conversations
    from memrl.llm.local import LocalLLM
    from memrl.train.loop import LoopConfig, train
    from memrl.train.tasks import AnswerTasks
    from memrl.train.trainer import TrainerConfig

    t0 = time.perf_counter()
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    timings: dict[str, float] = {}

    # the store: every conversation's turns, by memrl eval's raw builder (test and train namespaces)
    t = time.perf_counter()
    for split in ("test", "train"):
        from memrl.eval.qa import QAEvaluation

        cfg = QAEvalConfig(dataset="locomo", split=split, mode="build", builder="raw",
                           db_path=str(args.out / "memory.db"), output_dir=str(args.out / f"build-{split}"))  # fmt: skip
        import asyncio

        asyncio.run(QAEvaluation(cfg, llm=object(), progress=not args.quiet).run())
    timings["build_store_s"] = time.perf_counter() - t

    t = time.perf_counter()
    before = evaluate(args.out / "before", None, args)
    timings["eval_before_s"] = time.perf_counter() - t
    base = LocalLLM(max_batch_size=16).load()

    train_convs = load_conversations(
        QAEvalConfig(dataset="locomo", split="train", questions=args.train_questions)
    )
    tasks = AnswerTasks(train_convs, db_path=str(args.out / "memory.db"), top_k=args.top_k,
                        max_tokens=args.answer_tokens)  # fmt: skip
    loop = LoopConfig(steps=args.steps, group_size=args.group_size, tasks_per_step=args.tasks_per_step,
                      temperature=args.temperature, save_every=10, seed=args.seed,
                      output_dir=str(args.out / "train"))  # fmt: skip
    trainer = TrainerConfig(lr=args.lr, lora_rank=args.lora_rank, kl_coef=args.kl_coef, loss_agg=args.loss_agg,
                            micro_batch=args.group_size)  # fmt: skip
    t = time.perf_counter()
    # what is left of the budget, less the evaluation after training (as long as the one before) and a
    # margin for the last step, the checkpoint and loading it
    left = args.budget_minutes * 60 - (time.perf_counter() - t0) - timings["eval_before_s"] - 90
    rows = train(base, tasks, loop, trainer, progress=not args.quiet, time_limit_s=max(0.0, left))
    timings["train_s"] = time.perf_counter() - t

    t = time.perf_counter()
    after = evaluate(args.out / "after", str(args.out / "train" / "checkpoint"), args)
    timings["eval_after_s"] = time.perf_counter() - t

    plot(args.out / "learning.png", rows, before, after)
    result = {
        "task": "answer", "model": "SmolLM2-135M-Instruct", "train": "LoCoMo train split (7 conversations)",
        "eval": "LoCoMo test split (conv-43, conv-26, conv-30), categories 1-4",
        "metric": "LoCoMo F1 (x100), memrl eval --mode answer",
        "before": round(100 * before["f1"], 2), "before_ci": [round(100 * x, 2) for x in before["f1_ci"]],
        "after": round(100 * after["f1"], 2), "after_ci": [round(100 * x, 2) for x in after["f1_ci"]],
        "significant": bool(after["f1_ci"][0] > before["f1_ci"][1] or after["f1_ci"][1] < before["f1_ci"][0]),
        "n_eval": after["n_answered"], "n_train_questions": len(tasks), "steps": len(rows),
        "group_size": args.group_size, "tasks_per_step": args.tasks_per_step, "lr": args.lr,
        "lora_rank": args.lora_rank, "top_k": args.top_k, "answer_tokens": args.answer_tokens,
        "temperature": args.temperature, "kl_coef": args.kl_coef,
        "train_reward_first5": round(sum(r["reward_mean"] for r in rows[:5]) / min(5, len(rows)), 4),
        "train_reward_last5": round(sum(r["reward_mean"] for r in rows[-5:]) / min(5, len(rows)), 4),
        "format_errors_before": before["n_format_errors"], "format_errors_after": after["n_format_errors"],
        **{k: round(v, 1) for k, v in timings.items()},
        "wall_time_s": round(time.perf_counter() - t0, 1),
        "curve": str(args.out / "learning.png"),
    }  # fmt: skip
    (args.out / "learning.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
