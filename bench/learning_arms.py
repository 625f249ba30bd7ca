"""Learning without an expert (issue 54): outcome-only training of ``read`` (MemAgent) on one of RULER's
generated needle tasks, every non-RL use of the same reward beside GRPO, each arm given the same number of
sampled rollouts.

    python -m bench.learning_arms --arm grpo --eval-split validation --seed 0 --out runs/learning/arms/grpo-val-s0
    python -m bench.learning_arms --table runs/learning/arms/*-val-s0          # the table of the runs named

The arms (``--arm``), all LoRA at the same learning rate, on the same fit items (generated with the fit
seed, :mod:`bench.learning_ruler`) and scored on the same held-out items:

* ``untrained``: the model as it ships;
* ``answer-sft``: answer-only SFT: rollouts sampled from the current policy read the chunks themselves,
  and the final call (the model's own memory in its prompt) is trained towards the gold answer in the box:
  the only imitation an outcome label allows (no expert memory);
* ``raft``: rejection-sampling fine-tuning (RAFT/STaR): rollouts sampled from the current policy, those
  that earned reward kept (``--keep``), SFT on every call of each (its memory writes and its answer);
* ``grpo``: GRPO alone (:func:`memrl.train.loop.train`), no SFT first;
* ``expert-sft``, ``expert-sft-grpo``: SFT on an expert reader (``--expert cut``: needle sentences cut to
  the memory budget; ``compressed``: the values alone), alone (``--sft-seconds``: for a given time) or
  followed by GRPO (:mod:`bench.learning_expert`): the second experiment, niah_multivalue with
  ``--reward values``, where the verbatim expert cannot fit the budget.

The budget is ``--rollouts`` sampled rollouts for every trained arm (GRPO: ``rollouts / (tasks_per_step *
group_size)`` steps; the others as many rounds of the same shape, :mod:`memrl.train.raft`): on a shared CPU
wall time is unfair, so it is recorded (``wall_s``, process ``cpu_s``) but not the budget. Each trained run
writes ``OUT/train/`` (metrics.jsonl with reward spread, groups with variance, ``kl_to_start``, the SFT
loss, the held-out reward on ``--watch-items`` validation items every ``--watch-every`` steps; report.md;
reward.png), ``OUT/predictions.jsonl`` (every held-out prediction, the rules' beside it; a transfer task's in
``OUT/transfer-TASK-LENGTH.jsonl``), ``OUT/arm.json``
(the summary, the protocol and its test ledger) and, with ``--transfer-items``, the trained policy's
scores on niah_single_1 at 4k and niah_single_2 at 1k (``test`` items of those tasks). Items are their own
documents, so the intervals resample items.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ARMS = ("untrained", "answer-sft", "raft", "grpo", "expert-sft", "expert-sft-grpo")
#: Transfer tasks: (RULER task, length) scored on their test items after training.
TRANSFER = (("niah_single_1", "4k"), ("niah_single_2", "1k"))
#: Arguments that only say where things go (left out of the protocol's setting, with its own list).
_BOOKKEEPING = (
    "table",
    "watch_items",
    "watch_every",
    "transfer_items",
    "adapter_dir",
    "from_run",
    "transfer_only",
)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arm", choices=ARMS)
    ap.add_argument("--table", nargs="+", type=Path, help="print the table of these run folders and exit")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-split", default="validation", choices=["validation", "test"])
    ap.add_argument("--ledger", type=Path, default=Path("runs/protocol/test-evaluations.jsonl"))
    ap.add_argument("--ruler-task", default="niah_single_1")
    ap.add_argument("--length", default="1k")
    ap.add_argument("--train-items", type=int, default=24)
    ap.add_argument("--eval-items", type=int, default=24)
    ap.add_argument("--chunk-tokens", type=int, default=512)
    ap.add_argument("--memory-tokens", type=int, default=48)
    ap.add_argument("--answer-tokens", type=int, default=24)
    ap.add_argument("--memory-first", action="store_true", help="the original chunk prompt order")
    ap.add_argument(
        "--reward",
        default="reward",
        choices=["reward", "f1", "sub_em", "values"],
        help="the rollouts' reward (values: the box as a value set, for niah_multivalue)",
    )
    ap.add_argument("--expert", default="cut", choices=["cut", "compressed"],
                    help="expert-sft(-grpo): the needle sentences cut to the budget, or compressed to the values")  # fmt: skip
    ap.add_argument("--sft-seconds", type=float,
                    help="expert-sft: train for this long (as many passes as fit) instead of --sft-epochs")  # fmt: skip
    ap.add_argument("--rollouts", type=int, default=96, help="every trained arm's budget: rollouts sampled")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--tasks-per-step", type=int, default=2, help="tasks per GRPO step / RAFT round")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--keep", default="positive", choices=["positive", "best"], help="raft: rollouts kept")
    ap.add_argument(
        "--sft-epochs", type=int, default=1, help="answer-sft, raft: passes over a round's examples"
    )
    ap.add_argument("--sft-batch", type=int, default=8)
    ap.add_argument("--watch-items", type=int, default=8, help="validation items scored while training")
    ap.add_argument("--watch-every", type=int, default=3, help="... every N steps (and before and after)")
    ap.add_argument(
        "--transfer-items", type=int, default=0, help="test items of each transfer task (0: none)"
    )
    ap.add_argument("--adapter-dir", type=Path, help="trained arms: save the LoRA adapter here (not in git)")
    ap.add_argument("--from-run", type=Path,
                    help="no training: load the adapter a trained run of the same setting saved (its arm.json "
                         "names it) and evaluate it (e.g. the validation run's policy on test)")  # fmt: skip
    ap.add_argument("--transfer-only", action="store_true",
                    help="with --from-run (or --arm untrained): only the transfer tasks (--transfer-items)")  # fmt: skip
    ap.add_argument("--model", help="HF folder (default: the offline SmolLM2-135M-Instruct)")
    ap.add_argument("--batch", type=int, default=16, help="generation batch of the back-end")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.table:
        return args
    if not args.arm or not args.out:
        ap.error("--arm and --out are needed (or --table)")
    per = args.group_size * args.tasks_per_step
    if args.arm != "untrained" and (args.rollouts < per or args.rollouts % per):
        ap.error(f"--rollouts must be a positive multiple of group_size x tasks_per_step ({per})")
    if args.transfer_only and not args.transfer_items:
        ap.error("--transfer-only needs --transfer-items")
    args.task = "read"  # for the protocol's ledger
    return args


def _setting(args: argparse.Namespace) -> argparse.Namespace:
    """The arguments that make the setting (the protocol hashes them); an untrained run's is its data alone."""
    keep = {k: v for k, v in vars(args).items() if k not in _BOOKKEEPING}
    if args.transfer_only:  # its own evaluation of test items (other tasks'): its own ledger count
        keep["transfer"] = [f"{t}@{n}" for t, n in TRANSFER]
    if args.arm == "untrained":
        data = ("arm", "ruler_task", "length", "eval_items", "chunk_tokens", "memory_tokens", "answer_tokens",
                "memory_first", "eval_split", "seed", "out", "ledger", "task", "model", "transfer")  # fmt: skip
        keep = {k: v for k, v in keep.items() if k in data}
    return argparse.Namespace(**keep)


def _heldout(args: argparse.Namespace, config: Any) -> Any:
    """The first ``--watch-items`` validation items, scored greedily while training (never test items)."""
    from bench.learning_ruler import generated
    from memrl.train.heldout import HeldOut
    from memrl.train.tasks import ReadTasks

    _, convs, _ = generated(args, "validation", args.eval_items)
    return HeldOut(ReadTasks(convs[: args.watch_items], config, reward=args.reward))


def grpo(llm: Any, args: argparse.Namespace, tasks: Any, heldout: Any) -> list[dict[str, Any]]:
    """GRPO (:func:`memrl.train.loop.train`, a fresh LoRA adapter) on ``--rollouts`` rollouts, in place on
    ``llm``, writing ``OUT/train/``; its metrics rows."""
    from memrl.train.loop import LoopConfig, train
    from memrl.train.trainer import TrainerConfig

    steps = args.rollouts // (args.group_size * args.tasks_per_step)
    out = args.out / "train"
    loop = LoopConfig(steps=steps, group_size=args.group_size, tasks_per_step=args.tasks_per_step,
                      temperature=args.temperature, save_every=10**6, seed=args.seed, output_dir=str(out),
                      tensorboard=False, eval_every=args.watch_every if heldout else 0)  # fmt: skip
    trainer = TrainerConfig(lr=args.lr, lora_rank=args.lora_rank, micro_batch=8, micro_tokens=8192)
    rows = train(llm, tasks, loop, trainer, progress=not args.quiet, heldout=heldout)
    shutil.rmtree(out / "checkpoint", ignore_errors=True)  # the merged model: not kept
    return rows


def train_arm(
    llm: Any, args: argparse.Namespace, fit_items: list[Any], fit_convs: list[Any], config: Any, sft: dict
) -> list[dict[str, Any]]:
    """The arm's training, in place on ``llm``; its metrics rows (``sft``: the expert SFT's summary)."""
    from memrl.train.tasks import ReadTasks

    tasks = ReadTasks(fit_convs, config, reward=args.reward)
    heldout = _heldout(args, config) if args.watch_items else None
    steps = args.rollouts // (args.group_size * args.tasks_per_step)
    out = str(args.out / "train")
    if args.arm.startswith("expert-sft"):
        from bench.learning_expert import expert_sft, then_grpo

        rows, summary = expert_sft(llm, args, fit_items, fit_convs, config)
        sft.update(summary)
        return then_grpo(llm, args, tasks, heldout) if args.arm == "expert-sft-grpo" else rows
    if args.arm == "grpo":
        return grpo(llm, args, tasks, heldout)
    from memrl.train.raft import RaftConfig, raft

    cfg = RaftConfig(rounds=steps, tasks_per_round=args.tasks_per_step, group_size=args.group_size,
                     temperature=args.temperature, target="gold" if args.arm == "answer-sft" else "rollout",
                     keep=args.keep, epochs=args.sft_epochs, batch_size=args.sft_batch, lr=args.lr,
                     lora_rank=args.lora_rank, seed=args.seed, output_dir=out,
                     eval_every=args.watch_every if heldout else 0)  # fmt: skip
    return raft(llm, tasks, cfg, gold=lambda i: tasks.items[i][1].answers[0], heldout=heldout,
                progress=not args.quiet)  # fmt: skip


def load_trained(llm: Any, args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The adapter and training rows of ``--from-run``, a trained run of the same arm, set on ``llm``."""
    from memrl.train.lora import add_lora, load_adapter

    run = json.loads((args.from_run / "arm.json").read_text())
    if run["arm"] != args.arm or not run.get("trained", {}).get("adapter"):
        raise SystemExit(f"{args.from_run} is not a saved {args.arm} run (no adapter in its arm.json)")
    if args.arm == "expert-sft-grpo":
        from bench.learning_expert import load_stacked

        load_stacked(llm, run, args.lora_rank)
    else:
        add_lora(llm.hf_model, rank=args.lora_rank, alpha=32.0)
        load_adapter(llm.hf_model, Path(run["trained"]["adapter"]))
    path = args.from_run / "train" / ("sft_metrics.jsonl" if args.arm == "expert-sft" else "metrics.jsonl")
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return rows, {"from_run": str(args.from_run), "adapter": run["trained"]["adapter"], "run": run}


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    return round(100 * sum(r[key] for r in rows) / len(rows), 2) if rows else float("nan")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from bench.learning_ruler import evaluate, generated, reader_config, rules, score
    from memrl.eval.protocol import protocol
    from memrl.llm.local import LocalLLM

    t0, c0 = time.perf_counter(), time.process_time()
    fit_items, fit_convs, fit_digest = generated(args, "fit", args.train_items)
    items, convs, digest = generated(args, args.eval_split, args.eval_items)
    llm = LocalLLM(args.model, max_batch_size=args.batch, threads=args.threads, device=args.device).load()
    config = reader_config(args)
    rows: list[dict[str, Any]] = []
    t = time.perf_counter()
    trained: dict[str, Any] = {}
    sft: dict[str, Any] = {}
    if args.from_run:
        rows, trained = load_trained(llm, args)
    elif args.arm != "untrained":
        rows = train_arm(llm, args, fit_items, fit_convs, config, sft)
        if args.adapter_dir:
            from memrl.train.lora import save_adapter

            args.adapter_dir.mkdir(parents=True, exist_ok=True)
            save_adapter(llm.hf_model, args.adapter_dir)
            trained["adapter"] = str(args.adapter_dir)
    train_s = time.perf_counter() - t
    t = time.perf_counter()
    after: list[dict[str, Any]] = []
    trivial: dict[str, list[dict[str, float]]] = {}
    if not args.transfer_only:
        after = evaluate(llm, items, convs, config)
        trivial = {
            name: [score(p, it) for p, it in zip(preds, items, strict=True)]
            for name, preds in rules(items).items()
        }
        with (args.out / "predictions.jsonl").open("w") as f:
            for it, r, *ruled in zip(items, after, *trivial.values(), strict=True):
                rule_rows = {name: x["score"] for name, x in zip(trivial, ruled, strict=True)}
                f.write(
                    json.dumps({"id": it.id, "gold": it.answers, **r, "rules": rule_rows}, ensure_ascii=False)
                    + "\n"
                )
    eval_s = time.perf_counter() - t
    transfer = {}
    for task, length in TRANSFER if args.transfer_items else ():
        other = argparse.Namespace(**{**vars(args), "ruler_task": task, "length": length})
        t_items, t_convs, t_digest = generated(other, "test", args.transfer_items)
        t_rows = evaluate(llm, t_items, t_convs, config)
        with (args.out / f"transfer-{task}-{length}.jsonl").open("w") as f:  # the predictions, kept
            for it, r in zip(t_items, t_rows, strict=True):
                f.write(json.dumps({"id": it.id, "gold": it.answers, **r}, ensure_ascii=False) + "\n")
        transfer[f"{task}@{length}"] = {"score": _mean(t_rows, "score"), "n": len(t_rows), "sha256": t_digest,
                                        "scores": [r["score"] for r in t_rows],
                                        "rules": {n: _mean([score(p, it) for p, it in zip(ps, t_items, strict=True)], "score")
                                                  for n, ps in rules(t_items).items()}}  # fmt: skip
    rollouts = int(sum(r.get("rollouts", 0) for r in rows))
    if args.arm in ("grpo", "expert-sft-grpo"):
        rollouts = len(rows) * args.group_size * args.tasks_per_step
    if args.from_run:  # the training's budget is the trained run's
        trained.update({k: trained["run"][k] for k in ("wall_s", "cpu_s", "train_s")})
    result = {
        "arm": args.arm, "seed": args.seed, "eval_split": args.eval_split, "n_eval": len(items),
        "score": _mean(after, "score"), "em": _mean(after, "em"), "needle_in_memory": _mean(after, "needle_in_memory"),
        **({"values": _mean(after, "values")} if after and "values" in after[0] else {}),
        **({"sft": sft} if sft else {}),
        "rules": {name: _mean(rs, "score") for name, rs in trivial.items()},
        "rollouts": rollouts, "steps": len(rows),
        "train_reward_first": rows[0].get("reward_mean") if rows else None,
        "train_reward_last": rows[-1].get("reward_mean") if rows else None,
        "heldout_reward_at_start": rows[0].get("heldout_reward_at_start") if rows else None,
        "heldout_reward_end": rows[-1].get("heldout_reward") if rows else None,
        "kl_to_start_end": rows[-1].get("kl_to_start") if rows else None,
        "train_s": round(train_s, 1), "eval_s": round(eval_s, 1),
        "transfer": transfer, **({"trained": {k: v for k, v in trained.items() if k != "run"}} if trained else {}),
        "setting": {"ruler_task": args.ruler_task, "length": args.length, "n_train_items": len(fit_items),
                    "memory_tokens": args.memory_tokens, "chunk_tokens": args.chunk_tokens,
                    "sha256": {"fit": fit_digest, args.eval_split: digest}},
        "protocol": protocol(_setting(args), record=True),
        "command": "python -m bench.learning_arms " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": f"{os.cpu_count()} CPU cores (shared), no GPU",
        "wall_s": round(time.perf_counter() - t0, 1), "cpu_s": round(time.process_time() - c0, 1),
    }  # fmt: skip
    return result


def _load(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    res = json.loads((folder / "arm.json").read_text())
    preds = [json.loads(x) for x in (folder / "predictions.jsonl").read_text().splitlines() if x.strip()]
    return res, preds


def transfer_table(folders: list[Path]) -> str:
    """The transfer runs (``--transfer-only``) of ``folders``: per task, each arm's score on the task's test
    items and its paired difference from the untrained run's on the same items (same item digest)."""
    from memrl.eval.stats import paired_difference

    runs = [(json.loads((f / "arm.json").read_text()), f) for f in folders]
    base = next((r["transfer"] for r, _ in runs if r["arm"] == "untrained" and r.get("transfer")), {})
    lines = ["| arm | seed | task | items | score | untrained, same items | minus untrained (95% CI) |",
             "|---|---:|---|---:|---:|---:|---:|"]  # fmt: skip
    groups: dict[tuple[str, str], list[dict[Any, float]]] = {}
    for r, f in runs:
        for task, t in (r.get("transfer") or {}).items():
            d = u = "-"
            ref = base.get(task)
            if r["arm"] != "untrained" and ref and ref["sha256"] == t["sha256"]:
                pd = paired_difference(ref["scores"], t["scores"], scale=100)
                d = f"{pd['diff']:+.1f} ({pd['ci'][0]:+.1f}..{pd['ci'][1]:+.1f})"
                u = f"{ref['score']:.1f}"
                groups.setdefault((r["arm"], task), []).append(dict(enumerate(t["scores"])))
            lines.append(
                f"| {r['arm']} (`{f.name}`) | {r['seed']} | {task} | {t['n']} | {t['score']:.1f} | {u} | {d} |"
            )
    lines += _seed_summary(groups, {task: dict(enumerate(t["scores"])) for task, t in base.items()}, "task")
    return "\n".join(lines)


def _seed_summary(
    groups: dict[tuple[str, str], list[dict[Any, float]]], base: dict[str, dict[Any, float]], col: str
) -> list[str]:
    """For each (arm, split or task) run with several seeds: the seeds' mean score and the seed-averaged
    paired difference from the untrained run (``base``, by item), then every two arms against each other,
    each seed-averaged per item (items resampled)."""
    from memrl.eval.stats import paired_difference

    lines: list[str] = []
    multi = {k: v for k, v in groups.items() if len(v) > 1}
    if multi:
        lines += ["", f"| arm | {col} | seeds | mean score | seed-averaged minus untrained (95% CI, items resampled) |",
                  "|---|---|---:|---:|---:|"]  # fmt: skip
        means: dict[tuple[str, str], dict[str, float]] = {}
        for (arm, split), seeds in multi.items():
            ids = [i for i in seeds[0] if all(i in x for x in seeds)]
            means[arm, split] = {i: sum(x[i] for x in seeds) / len(seeds) for i in ids}
            avg = list(means[arm, split].values())
            pd = paired_difference([base[split][i] for i in ids], avg, scale=100)
            lines.append(f"| {arm} | {split} | {len(seeds)} | {100 * sum(avg) / len(avg):.1f} | "
                         f"{pd['diff']:+.1f} ({pd['ci'][0]:+.1f}..{pd['ci'][1]:+.1f}) |")  # fmt: skip
        pairs = [(a, b) for a in means for b in means if a[1] == b[1] and a[0] < b[0]]
        if pairs:  # arm against arm, each seed-averaged per item
            lines += [
                "",
                f"| arm minus arm | {col} | difference (95% CI, items resampled) |",
                "|---|---|---:|",
            ]
            for (a, split), (b, _) in pairs:
                ids = [i for i in means[a, split] if i in means[b, split]]
                pd = paired_difference([means[b, split][i] for i in ids], [means[a, split][i] for i in ids],
                                       scale=100)  # fmt: skip
                lines.append(
                    f"| {a} minus {b} | {split} | {pd['diff']:+.1f} ({pd['ci'][0]:+.1f}..{pd['ci'][1]:+.1f}) |"
                )
    return lines


def _label(r: dict[str, Any]) -> str:
    """A run's arm with what tells its settings apart under one arm name: the expert, and SFT for a set time."""
    cmd = r.get("command", "")
    got = re.search(r"--expert (\S+)", cmd)
    extra = [got.group(1)] if got and r["arm"].startswith("expert") else []
    if "--sft-seconds" in cmd:
        extra.append("for the SFT-then-GRPO run's time")
    return f"{r['arm']} ({', '.join(extra)})" if extra else r["arm"]


def table(folders: list[Path]) -> str:
    """One row per run, paired by item id with the untrained run on the same split (which may hold more
    items: generated items depend on their index only, so its first n are a shorter run's n): the
    untrained score on the same items and the item-bootstrap interval of the difference; then per arm and
    split the seeds' mean and the seed-averaged paired difference; the rules on the trained runs' items."""
    from memrl.eval.stats import bootstrap_ci, paired_difference

    runs = [_load(f) for f in folders]
    base = {r["eval_split"]: {p["id"]: p["score"] for p in ps} for r, ps in runs if r["arm"] == "untrained"}
    lines = ["| arm | split | seed | items | score (95% CI) | untrained, same items | minus untrained (95% CI) | "
             "needle in memory | rollouts | steps | training run's wall s | its CPU s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    groups: dict[tuple[str, str], list[dict[str, float]]] = {}
    rules: dict[str, dict[str, float]] = {}
    for (r, ps), folder in zip(runs, folders, strict=True):
        s = {p["id"]: p["score"] for p in ps}
        m, lo, hi = bootstrap_ci([100 * x for x in s.values()])
        d, u = "-", "-"
        ref = base.get(r["eval_split"], {})
        if r["arm"] != "untrained" and ref and set(s) <= set(ref):
            ids = list(s)
            pd = paired_difference([ref[i] for i in ids], [s[i] for i in ids], scale=100)
            d = f"{pd['diff']:+.1f} ({pd['ci'][0]:+.1f}..{pd['ci'][1]:+.1f})"
            u = f"{100 * sum(ref[i] for i in ids) / len(ids):.1f}"
            groups.setdefault((_label(r), r["eval_split"]), []).append(s)
            rules[r["eval_split"]] = {
                k: 100 * sum(p["rules"][k] for p in ps) / len(ps) for k in ps[0]["rules"]
            }
        spent = (
            r.get("trained", {}) if "from_run" in r.get("trained", {}) else r
        )  # a loaded policy: its training's
        lines.append(f"| {_label(r)} (`{folder.name}`) | {r['eval_split']} | {r['seed']} | {len(s)} | {m:.1f} ({lo:.1f}..{hi:.1f}) | "
                     f"{u} | {d} | {r['needle_in_memory']:.1f} | {r['rollouts']} | {r['steps']} | {spent['wall_s']:.0f} | "
                     f"{spent['cpu_s']:.0f} |")  # fmt: skip
    for split, rs in rules.items():
        lines.append(
            f"\nRules on the same {split} items: " + ", ".join(f"{k} {v:.1f}" for k, v in rs.items())
        )
    lines += _seed_summary(groups, base, "split")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.table:  # runs with predictions on their own split; transfer-only runs have none
        own = [f for f in args.table if (f / "predictions.jsonl").exists()]
        other = [f for f in args.table if f not in own]
        return print(
            "\n\n".join(x for x in (table(own) if own else "", transfer_table(other) if other else "") if x)
        )
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    result = run(args)
    (args.out / "arm.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
