"""The learning benchmark: does ``memrl train grpo`` teach the offline model something a rule cannot do?

One seed of one task, in a fixed time budget (default 29 minutes, everything counted): trivial baselines
fitted on TRAIN items, the untrained model evaluated on held-out items, GRPO training (LoRA) with
``memrl train grpo``'s own code (:func:`memrl.train.loop.train`, the task sets of
:mod:`memrl.train.tasks`) on TRAIN items only, the trained model evaluated on the same held-out items.
The protocol (:mod:`memrl.eval.protocol`): TRAIN items come from LoCoMo's ``fit`` conversations, held-out
items from its ``validation`` conversations (``--eval-split validation``, the default, where settings are
compared) or, for a final setting, its ``test`` conversations (``--eval-split test``: the run is counted in
a ledger and the result says how many test evaluations its setting has had). With an SFT stage (answer,
read) the model is also evaluated after SFT, and RL's own effect is *after minus after SFT*, paired::

    .venv/bin/python -m bench.learning --task read --seed 0 --out runs/learning-read-s0
    .venv/bin/python -m bench.learning --task read --eval-split test --seed 0 --out runs/learning-read-test-s0
    .venv/bin/python -m bench.learning --task answer --sft-minutes 5 --out runs/learning-answer
    .venv/bin/python -m bench.learning --task update --out runs/learning-update
    .venv/bin/python -m bench.learning --task build --out runs/learning-build

* ``read`` (:mod:`bench.learning_read`): MemAgent on RULER-LoCoMo documents (evidence session + distractor
  sessions of the same split), train documents from LoCoMo's train conversations, test documents from its
  test conversations (conv-43, conv-26, conv-30).
* ``answer`` (:mod:`bench.learning_answer`): QA from the top-k memories of a ``raw`` store, ``memrl eval``'s code.
* ``update`` / ``build`` (:mod:`bench.learning_tools`): MemUpdate episodes and MemBuilder sessions, held-out reward.

Trivial baselines (:mod:`bench.learning_baselines`) and the verdict (:mod:`bench.learning_report`): a gain counts
only when the paired 95% interval of *after minus the better of before and the best trivial baseline* (per
item; a cluster bootstrap over conversations) excludes 0. Writes OUT/learning.json, OUT/learning.md, OUT/predictions.jsonl (every
prediction of every system), OUT/learning.png and OUT/train/ (metrics.jsonl, rollouts.jsonl, report.md,
reward.png, checkpoint/). The last line of stdout is the JSON object: ``task``, ``before``, ``after``,
``best_trivial``, ``gain_ci_low``, ``gain_ci_high``, ``seed``, ``n_eval``, ``wall_time_s`` and the rest.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from memrl.eval.protocol import EVAL_SPLITS


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", required=True, choices=["read", "answer", "update", "build"])
    ap.add_argument("--out", type=Path, help="output folder (default runs/learning-TASK-sSEED)")
    ap.add_argument("--seed", type=int, default=0, help="training seed (task order, sampling)")
    ap.add_argument("--eval-split", default="validation", choices=list(EVAL_SPLITS),
                    help="held-out items: LoCoMo's validation conversations (settings are chosen here) or, for "
                         "a final setting, its test conversations (counted in --ledger)")  # fmt: skip
    ap.add_argument("--ledger", type=Path, default=Path("runs/protocol/test-evaluations.jsonl"),
                    help="append-only record of test evaluations (--eval-split test)")  # fmt: skip
    ap.add_argument("--budget-minutes", type=float, default=29.0, help="the whole benchmark's time budget")
    ap.add_argument("--margin-s", type=float, default=60.0, help="time kept for the last step and the report")
    ap.add_argument(
        "--steps", type=int, default=10_000,
        help="at most this many GRPO steps (the budget decides); read, answer: 0 = no GRPO, the SFT-only control",
    )  # fmt: skip
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--tasks-per-step", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=0.7, help="GRPO rollout temperature")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--lora-rank", type=int, default=16, help="0 = full fine-tuning")
    ap.add_argument("--kl-coef", type=float, default=0.0)
    ap.add_argument("--max-grad-norm", type=float, default=1.0)
    ap.add_argument("--micro-batch", type=int, default=8, help="sequences per forward pass of the update")
    ap.add_argument("--micro-tokens", type=int, default=8192, help="tokens per forward pass of the update")
    ap.add_argument("--batch", type=int, default=16, help="generation batch of the back-end")
    ap.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    ap.add_argument(
        "--device", default="cpu", help="torch device of the model: cpu, cuda (not part of the setting)"
    )
    ap.add_argument(
        "--model", help="HF folder of the model to train (default: the offline SmolLM2-135M-Instruct)"
    )
    ap.add_argument("--eval-items", type=int, default=0,
                    help="read/update/build: held-out items, a sample stratified to the category mix (0: all; "
                         "read --ruler-task: generated items, 0 = 64)")  # fmt: skip
    g = ap.add_argument_group("read")
    g.add_argument("--length", default="1k", help="document length (RULER-LoCoMo tokens, e.g. 1k, 2k)")
    g.add_argument("--ruler-task", help="read on one of RULER's generated single-answer tasks (niah_single_1, ...; "
                                        "bench/learning_ruler.py) instead of RULER-LoCoMo documents")  # fmt: skip
    g.add_argument("--train-items", type=int, default=128, help="read --ruler-task: generated training items")
    g.add_argument("--chunk-tokens", type=int, default=512)
    g.add_argument(
        "--before-cache", help="file holding the untrained model's evaluation, reused by later seeds"
    )
    g.add_argument("--before-only", action="store_true",
                   help="read: only the untrained model's evaluation, written to --before-cache (so that every "
                        "seed's run gets the same training time)")  # fmt: skip
    g.add_argument("--eval-bf16", action="store_true",
                   help="read: the evaluations prefill prompts in bfloat16 (1.17x faster on an AVX-512 BF16 CPU, slower on AVX2 only; greedy outputs may "
                        "differ slightly from fp32's, so the cached untrained evaluation is keyed by it)")  # fmt: skip
    g.add_argument("--eval-estimate-s", type=float, default=0.0,
                   help="seconds the evaluation after training will take (default: as long as the one before)")  # fmt: skip
    g.add_argument("--memory-tokens", type=int, default=48)
    g.add_argument("--memory-first", action="store_true",
                   help="the original chunk prompt (memory before the section; default: after it, so a group's "
                        "prompts share the section, prefilled once)")  # fmt: skip
    g.add_argument(
        "--reward", default="f1", choices=["f1", "reward", "sub_em"], help="read's training reward"
    )
    g = ap.add_argument_group("update")
    g.add_argument("--tool-choice", default="auto", choices=["auto", "required"],
                   help="update: auto lets the model end an episode in text; required forces a tool call every turn")  # fmt: skip
    g.add_argument("--embedder", default="minilm",
                   help="update, build, answer: the memory's embedder (minilm; hashing: a fast deterministic one, for smoke tests)")  # fmt: skip
    g = ap.add_argument_group("answer")
    g.add_argument("--top-k", type=int, default=3, help="memories per question, in training and evaluation")
    g.add_argument(
        "--answer-tokens", type=int, default=40, help="answer budget (read: of the box), train and eval"
    )
    g.add_argument(
        "--eval-questions", type=int, help="answer: at most this many per test conversation (default all)"
    )
    g.add_argument("--train-questions", type=int, help="answer: at most this many per train conversation")
    g.add_argument("--baselines-only", action="store_true",
                   help="read, answer: only the no-model rules on the held-out items (no model)")  # fmt: skip
    g.add_argument("--sft-steps", type=int, default=0, help="answer, read: SFT optimizer steps before GRPO")
    g.add_argument(
        "--sft-minutes", type=float, default=0.0, help="answer, read: SFT time budget before GRPO (0: none)"
    )
    g.add_argument("--sft-lr", type=float, default=5e-5)
    g.add_argument("--sft-answer-repeat", type=int, default=1,
                   help="read: each answer example this many times per SFT epoch")  # fmt: skip
    g.add_argument("--sft-batch", type=int, default=8)
    g.add_argument("--sft-autocast", default="none", choices=["none", "bf16"],
                   help="answer, read: SFT forward/backward under bfloat16 autocast (fp32 weights; 1.23x faster per step on an AVX-512 BF16 CPU, several times slower on AVX2 only)")  # fmt: skip
    g.add_argument("--sft-epochs", type=int, default=1,
                   help="answer, read: passes over the SFT examples; with --sft-minutes, as many as fit the time")  # fmt: skip
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument(
        "--eval-only", type=Path, help=argparse.SUPPRESS
    )  # answer: one evaluation in a subprocess
    ap.add_argument("--eval-model", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.out = args.out or Path(f"runs/learning-{args.task}-s{args.seed}")
    if (
        min(args.sft_steps, args.sft_minutes, args.steps, args.eval_items) < 0
        or args.budget_minutes <= 0
        or args.sft_answer_repeat < 1
    ):
        ap.error(
            "--steps, --sft-steps, --sft-minutes and --eval-items must be >= 0, --budget-minutes > 0, --sft-answer-repeat >= 1"
        )
    if args.steps == 0 and args.task not in ("read", "answer"):
        ap.error("--steps 0 (no GRPO) is the SFT-only control of --task read and answer only")
    if args.steps == 0 and not (args.sft_steps or args.sft_minutes):
        ap.error("--steps 0 (no GRPO) needs --sft-steps or --sft-minutes: it is the SFT-only control")
    return args


def plot(path: Path, rows: list[dict], result: dict) -> None:
    """Training reward per step (and its running mean), and the held-out figures with the baselines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [2, 1.3]})
    if rows:
        steps = [r["step"] for r in rows]
        rewards = [
            100 * r["reward_mean"] if r["reward_mean"] == r["reward_mean"] else float("nan") for r in rows
        ]
        a.plot(steps, rewards, color="#999", lw=0.8, label="per step")
        k = 5
        smooth = [sum(x for x in rewards[max(0, i - k + 1) : i + 1] if x == x)
                  / max(1, sum(1 for x in rewards[max(0, i - k + 1) : i + 1] if x == x)) for i in range(len(rows))]  # fmt: skip
        a.plot(steps, smooth, color="C0", lw=2, label=f"mean of last {k}")
        a.legend(fontsize=8)
    a.set_xlabel("GRPO step")
    a.set_ylabel(f"training reward x 100 ({result['reward_name']})")
    a.set_title(f"{result['task']}: reward on TRAIN items, seed {result['seed']}")
    names = ["before", "after", *result["trivial"]]
    values = [result["before"], result["after"], *result["trivial"].values()]
    b.bar(range(len(names)), values, color=["C1", "C2"] + ["#bbb"] * len(result["trivial"]))
    b.set_xticks(range(len(names)), [n.replace("_", "\n") for n in names], fontsize=8)
    b.set_ylabel(f"held-out {result['metric_label']}")
    b.set_title(f"{result['protocol']['eval_split']} items, n={result['n_eval']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def train_summary(rows: list[dict]) -> dict[str, Any]:
    """What the training did: steps, step time, groups with signal, reward at the start and the end."""
    if not rows:
        return {"steps": 0}
    n = len(rows)
    first, last = rows[: min(5, n)], rows[-min(5, n) :]
    avg = lambda rs, k: round(sum(r.get(k, 0.0) for r in rs) / len(rs), 4)  # noqa: E731
    return {"steps": n, "s_per_step": avg(rows, "seconds"), "rollout_s_per_step": avg(rows, "rollout_seconds"),
            "groups_per_step": avg(rows, "groups"), "groups_with_signal_per_step": avg(rows, "groups_kept"),
            "skipped_steps": int(sum(r.get("skipped", 0) for r in rows)),
            "reward_first5": avg(first, "reward_mean"), "reward_last5": avg(last, "reward_mean"),
            "completion_tokens_per_step": avg(rows, "n_tokens")}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("MEMRL_DATA_DIR", str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.eval_only:
        from bench.learning_answer import eval_only

        return eval_only(args)
    from bench import learning_report as report
    from memrl.eval.protocol import cluster_of, protocol

    t0 = time.perf_counter()
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    if args.before_only:
        if args.task != "read" or not args.before_cache or args.ruler_task:
            raise SystemExit("--before-only is for --task read, with --before-cache FILE")
        from bench.learning_read import before_only

        return print(json.dumps(before_only(args, t0)))
    if args.baselines_only:
        if args.task == "read" and args.ruler_task:
            from bench.learning_ruler import baselines_only
        elif args.task == "read":
            from bench.learning_read import baselines_only
        elif args.task == "answer":
            from bench.learning_answer import baselines_only
        else:
            raise SystemExit("--baselines-only is for --task read or answer")

        return print(json.dumps(baselines_only(args, t0)))
    if args.task == "read" and args.ruler_task:
        from bench.learning_ruler import run
    elif args.task == "read":
        from bench.learning_read import run
    elif args.task == "answer":
        from bench.learning_answer import run
    else:
        from bench.learning_tools import run
    parts = run(args, t0)
    items, before, after, trivial = parts["items"], parts["before"], parts["after"], parts["trivial"]
    key = parts.get("metric", "f1")
    systems = {"before": before, "after": after, **({"after SFT": parts["after_sft"]} if "after_sft" in parts else {}),
               **trivial}  # fmt: skip
    clusters = [cluster_of(it) for it in items]
    report.write_predictions(args.out / "predictions.jsonl", items, systems)
    result: dict[str, Any] = {
        "task": args.task, "seed": args.seed, "model": ("SmolLM2-135M-Instruct (offline)" if args.model is None else args.model)
        + (", LoRA" if args.lora_rank else ", full fine-tuning"),
        "metric_label": parts.get("metric_label", "official LoCoMo F1 x100"),
        "reward_name": parts.get("reward_name", args.reward if args.task == "read" else "train F1"),
        **report.verdict(before, after, trivial, key, clusters=clusters),
        "n_eval": len(items), "eval_items": parts.get("eval_description", ""),
        "n_conversations": len(set(clusters)), "protocol": protocol(args, record=True),
    }  # fmt: skip
    if "after_sft" in parts:  # RL's own effect: the same items after GRPO against after SFT alone
        sft_rows = parts["after_sft"]
        result["after_sft"] = round(report.mean(sft_rows, key), 2)
        result["rl_over_sft"] = report.paired(sft_rows, after, key, clusters=clusters)
        result["sft_over_before"] = report.paired(before, sft_rows, key, clusters=clusters)
    # exact match beside F1 (LoCoMo), or beside the whole reply's metric (RULER: the box's)
    if key in ("f1", "score"):
        result["em"] = report.verdict(before, after, trivial, "em", clusters=clusters)
    if key == "f1":
        result["train_f1"] = report.verdict(before, after, trivial, "train_f1", clusters=clusters)
        result["by_category"] = {name: report.by_category([{**r, "category": it.category} for r, it in zip(rows, items, strict=True)])
                                 for name, rows in systems.items()}  # fmt: skip
        result["overall"] = {name: {"em": round(report.mean(rows, "em"), 2), "f1": round(report.mean(rows, "f1"), 2)}
                             for name, rows in systems.items()}  # fmt: skip
    result.update(
        setting=parts["setting"], train=train_summary(parts["rows"]),
        hyper={k: getattr(args, k) for k in ("group_size", "tasks_per_step", "temperature", "lr", "lora_rank",
                                             "kl_coef", "max_grad_norm")},
        **{k: round(v, 1) for k, v in parts["timings"].items()},
        **{k: v for k, v in parts.items() if k in ("sft", "measure", "evidence")},
        command="python -m bench.learning " + " ".join(sys.argv[1:] if argv is None else argv),
        date=time.strftime("%Y-%m-%d"), machine=f"{os.cpu_count()} CPU cores, no GPU",
        wall_time_s=round(time.perf_counter() - t0, 1), curve=str(args.out / "learning.png"),
        predictions=str(args.out / "predictions.jsonl"),
    )  # fmt: skip
    plot(args.out / "learning.png", parts["rows"], result)
    (args.out / "learning.json").write_text(json.dumps(result, indent=2))
    if key == "f1":
        (args.out / "learning.md").write_text(report.markdown(result))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
