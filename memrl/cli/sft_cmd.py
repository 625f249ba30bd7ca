"""``memrl train sft-membuilder``: MemBuilder's SFT stage, the local model fine-tuned on an expert's answers.

    memrl train sft-membuilder --dataset locomo --conv-id conv-30 --output-dir runs/sft [--resume]
    memrl train sft-membuilder --dataset locomo --split train --val-conv conv-49 --lora-rank 16 --lr 2e-4

The expert's trajectories are built once per output folder and kept (``OUTPUT_DIR/expert.jsonl``, with what
they were built from): a re-run or ``--resume`` with the same selection, expert and agent options reads them
instead of building them again; any other selection builds afresh.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from memrl.cli.common import add_conversation_args
from memrl.cli.train_data import _conversations, add_split_guard, write_run_meta
from memrl.config import add_arguments

EXPERT_FILE = "expert.jsonl"


def register_sft(tasks: argparse._SubParsersAction) -> None:
    from memrl.train.sft import SFTConfig

    p = tasks.add_parser(
        "sft-membuilder",
        help="MemBuilder: fine-tune the local model on an expert's answers (SFT before ADRPO)",
    )
    add_conversation_args(p)
    p.add_argument(
        "--all-conversations",
        action="store_true",
        help="every conversation of the data set's training split (all with --allow-eval-split)",
    )
    p.add_argument("--split", help="an original split (default: the training split, e.g. LoCoMo train)")
    add_split_guard(p)
    p.add_argument("--sessions", type=int, help="only the first N sessions of each conversation")
    p.add_argument(
        "--expert", default="annotations", choices=["annotations", "model"],
        help="annotations: the data set's own (LoCoMo observations and events, offline); model: an LLM's replies",
    )  # fmt: skip
    p.add_argument("--expert-provider", default="openai", help="--expert model: its provider")
    p.add_argument("--expert-model", help="--expert model: e.g. gpt-4.1 or a vLLM-served model")
    p.add_argument("--base-url", help="--expert model: OpenAI-compatible server URL")
    p.add_argument(
        "--embedder", default="minilm", help="embedder of the scratch store the expert builds into"
    )
    p.add_argument(
        "--model", help="the student: HF folder or hub id (default: offline SmolLM2-135M-Instruct)"
    )
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    p.add_argument(
        "--val-conv", action="append", default=[], metavar="ID",
        help="leave this conversation of the selection out of the SFT examples and measure the loss on its "
             "expert answers before training, after each epoch and at the end (OUTPUT_DIR/val.jsonl); "
             "repeatable",
    )  # fmt: skip
    p.add_argument(
        "--agent-option", action="append", default=[], metavar="KEY=VALUE",
        help="a field of MemBuilderConfig for the expert's run (the prompts the student learns from; with "
             "--expert annotations, of the annotations builder's AnnotationsConfig: max_operations 10 and "
             "core=sessions|first by default, so the targets are the memory `--builder annotations` "
             "builds): give the same values to --builder-option when the student builds (repeatable)",
    )  # fmt: skip
    p.add_argument(
        "--save-epochs", action="store_true",
        help="with --lora-rank: after each epoch keep the adapter as OUTPUT_DIR/epoch-K/ (adapter.safetensors in "
             "bfloat16 + adapter.json, loadable by --provider local --model OUTPUT_DIR/epoch-K), to choose the "
             "epoch on the validation loss",
    )  # fmt: skip
    p.add_argument(
        "--empty-share", type=float, default=None, metavar="S",
        help="keep this share of each agent's empty targets ({\"operations\": []}), a seeded choice, at least one "
             "(default 0.1: memrl.train.sft_data.EMPTY_SHARE; 1 keeps all, the data of the shipped adapter)",
    )  # fmt: skip
    p.add_argument("--output-dir", default="runs/sft")
    p.add_argument("--resume", action="store_true", help="continue from OUTPUT_DIR/checkpoint")
    p.add_argument(
        "--max-steps", type=int, help="stop (with a checkpoint) after this many optimizer steps in all"
    )
    p.add_argument(
        "--max-minutes", type=float,
        help="stop (with a checkpoint, validated) after the first step that ends past this many minutes of training",
    )  # fmt: skip
    p.add_argument(
        "--loss-examples", type=int, default=64,
        help="measure the training loss (before and after) and each validation loss on at most this many "
             "examples, a fixed seeded sample (0: all; a forward pass over every example of a long run costs "
             "as much as a third of an epoch)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true")
    add_arguments(p.add_argument_group("sft"), SFTConfig)
    p.set_defaults(func=_sft_membuilder)


def _sft_membuilder(args: argparse.Namespace) -> int:
    import asyncio
    import time

    from memrl.agents.membuilder import MemBuilderAgent, MemBuilderConfig
    from memrl.agents.membuilder.annotations import AnnotationsConfig
    from memrl.agents.membuilder.experts import annotation_expert
    from memrl.config import from_args, parse_options
    from memrl.errors import ConfigError
    from memrl.llm import create_llm
    from memrl.llm.local import LocalLLM
    from memrl.memory import AsyncMemory
    from memrl.train.sft import SFTConfig, SFTTrainer, sft_samples

    if args.expert == "model" and not args.expert_model:
        raise ConfigError("--expert model needs --expert-model (and --base-url for a local server)")
    if args.save_epochs and not getattr(args, "lora_rank", 0):
        raise ConfigError("--save-epochs keeps LoRA adapters: give --lora-rank")
    t_start = time.perf_counter()
    agent_cfg = parse_options(
        AnnotationsConfig if args.expert == "annotations" else MemBuilderConfig, args.agent_option
    )
    convs = _conversations(args)
    unknown = set(args.val_conv) - {c.id for c in convs}
    if unknown:
        raise ConfigError(f"--val-conv {', '.join(sorted(unknown))}: not among the selected conversations")
    if len(set(args.val_conv)) >= len(convs):
        raise ConfigError("--val-conv leaves no conversation to train on")
    write_run_meta(args, convs)
    if args.val_conv:
        meta = json.loads((Path(args.output_dir) / "run.json").read_text())
        meta["validation_conversations"] = sorted(set(args.val_conv))
        meta["conversations"] = [c for c in meta["conversations"] if c not in args.val_conv]
        (Path(args.output_dir) / "run.json").write_text(json.dumps(meta, indent=1) + "\n")

    async def expert_trajectories() -> tuple[list, list, int]:
        trajs, val, failures = [], [], 0
        for conv in convs:
            if args.expert == "annotations":
                expert = annotation_expert(
                    conv,
                    max_items=agent_cfg.max_operations,
                    max_chars=agent_cfg.max_item_chars,
                    core=agent_cfg.core,
                    interleave=agent_cfg.interleave,
                    dedupe=agent_cfg.dedupe,
                )
            else:
                kw = {"base_url": args.base_url} if args.base_url else {}
                expert = create_llm(args.expert_provider, args.expert_model, **kw)
            memory = AsyncMemory(":memory:", embedder=args.embedder)
            try:
                agent = MemBuilderAgent(expert, agent_cfg)
                for session in conv.sessions[: args.sessions] if args.sessions else conv.sessions:
                    result = await agent.build_session(memory, conv.id, conv, session)
                    (val if conv.id in args.val_conv else trajs).extend(result.trajectories)
                    failures += len(result.failures)
            finally:
                await memory.close()
        return trajs, val, failures

    source = expert_source(args, convs)
    kept = read_expert(Path(args.output_dir), source, resume=args.resume)
    if kept is None:
        trajs, val_trajs, expert_failures = asyncio.run(expert_trajectories())
        write_expert(Path(args.output_dir), source, trajs, val_trajs, expert_failures)
    else:
        trajs, val_trajs, expert_failures = kept
        print(f"expert trajectories read from {Path(args.output_dir) / EXPERT_FILE}", flush=True)
    expert_s = time.perf_counter() - t_start
    cfg = from_args(SFTConfig, args)
    n_expert = len(trajs)  # the expert's answers, before the empty targets are thinned
    trajs, val_trajs, data_stats = describe_data(args, trajs, val_trajs, cfg.seed)
    from memrl.train.trainer import checkpoint_folder

    found = checkpoint_folder(Path(args.output_dir) / "checkpoint") if args.resume else None
    if args.resume and found is None:
        raise ConfigError(f"--resume: no checkpoint in {Path(args.output_dir) / 'checkpoint'}")
    model = SFTTrainer.model_to_load(found) if found else args.model
    student = LocalLLM(model, device=args.device, threads=args.threads).load()
    samples, skipped = sft_samples(student, trajs, cfg.max_seq_tokens)
    val_samples, _ = sft_samples(student, val_trajs, cfg.max_seq_tokens)
    trainer = SFTTrainer(student, cfg)
    loss_set = subset(samples, args.loss_examples, cfg.seed)
    val_set = subset(val_samples, args.loss_examples, cfg.seed)
    before, n_tokens = trainer.loss_on(loss_set)
    val_log = Path(args.output_dir) / "val.jsonl"
    per_epoch = -(-len(samples) // cfg.batch_size)
    total = planned = cfg.epochs * per_epoch  # planned: every epoch; total: what this run may reach

    def validate(step: int, epoch: float) -> float:
        t0 = time.perf_counter()
        loss, n = trainer.loss_on(val_set)
        row = {"step": step, "epoch": epoch, "val_loss": round(loss, 4), "val_examples": len(val_set),
               "val_tokens": n, "seconds": round(time.perf_counter() - t0, 1)}  # fmt: skip
        with val_log.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"validation after step {step} (epoch {epoch:g}): loss per target token {loss:.4f}", flush=True)
        return loss

    if val_samples and not args.resume:
        val_log.unlink(missing_ok=True)
        validate(0, 0)

    if args.max_steps is not None:
        total = min(total, args.max_steps)
    limit_s = None if args.max_minutes is None else 60 * args.max_minutes
    t_fit = time.perf_counter()

    def on_step(row: dict) -> None:
        late = limit_s is not None and time.perf_counter() - t_fit > limit_s
        loss = None
        if val_samples and (row["step"] % per_epoch == 0 or row["step"] == total or late):
            loss = validate(row["step"], round(row["step"] / per_epoch, 3))
        if args.save_epochs and row["step"] % per_epoch == 0:
            save_epoch(trainer, args, row["step"] // per_epoch, row["step"], loss)

    rows = trainer.fit(samples, args.output_dir, resume=args.resume, on_step=on_step,
                       max_steps=args.max_steps, time_limit_s=limit_s)  # fmt: skip
    fit_s = time.perf_counter() - t_fit
    after, _ = trainer.loss_on(loss_set)
    vals = [json.loads(x) for x in val_log.read_text().splitlines()] if val_samples else []
    summary = {
        "conversations": len(convs) - len(set(args.val_conv)), "expert": args.expert,
        "expert_trajectories": n_expert, "expert_failures": expert_failures, "examples": len(samples),
        "skipped": skipped, "loss_examples": len(loss_set), "loss_target_tokens": n_tokens, "steps": len(rows),
        "total_steps": planned, "finished": len(rows) >= planned, "loss_before": round(before, 4),
        "loss_after": round(after, 4), "checkpoint": str(Path(args.output_dir) / "checkpoint"),
        "val_conversations": sorted(set(args.val_conv)), "val_examples": len(val_samples), "val_loss_examples": len(val_set),
        "expert_reused": kept is not None, "empty_dropped": data_stats["empty_dropped"],
        "val_loss": [(v["epoch"], v["val_loss"]) for v in vals], "expert_seconds": round(expert_s, 1),
        "fit_seconds": round(fit_s, 1), "wall_seconds": round(time.perf_counter() - t_start, 1),
    }  # fmt: skip
    (Path(args.output_dir) / "sft_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"SFT on {len(samples)} expert answers ({n_tokens} target tokens), {len(rows)} steps: loss per "
              f"target token {before:.3f} -> {after:.3f} (on the training examples); skipped {skipped}; "
              f"checkpoint {summary['checkpoint']} (use it with --provider local --model)")  # fmt: skip
        if vals:
            print("validation loss (" + ", ".join(summary["val_conversations"]) + "): "
                  + " -> ".join(f"{v['val_loss']:.3f}" for v in vals))  # fmt: skip
    return 0


def describe_data(args: argparse.Namespace, trajs: list, val: list, seed: int) -> tuple[list, list, dict]:
    """Thin the empty targets (``--empty-share``), then print and keep (``OUTPUT_DIR/sft_data.json``) what
    the SFT data holds: before training, so a person sees what it will teach."""
    from memrl.train.sft_data import EMPTY_SHARE, format_stats, sft_data_stats, thin_empty

    share = EMPTY_SHARE if args.empty_share is None else args.empty_share
    before = sft_data_stats(trajs)
    trajs, dropped = thin_empty(trajs, share, seed=seed)
    val, val_dropped = thin_empty(val, share, seed=seed)
    stats = {"empty_share": share, "empty_dropped": dropped, "val_empty_dropped": val_dropped,
             "expert": before, "trained": sft_data_stats(trajs), "validation": sft_data_stats(val)}  # fmt: skip
    (Path(args.output_dir) / "sft_data.json").write_text(json.dumps(stats, indent=1) + "\n")
    if not args.json:
        print(format_stats(stats["trained"]), flush=True)
        print(f"  (empty targets: kept a share of {share:g}, dropped {dropped} of "
              f"{before['total']['empty']}; in {Path(args.output_dir) / 'sft_data.json'})", flush=True)  # fmt: skip
    return trajs, val, stats


def agent_options(args: argparse.Namespace) -> list[str]:
    """The MemBuilder options the expert's prompts were asked with (``prompt_options``): what the adapter
    records, so that a builder loading it asks the same prompts (``max_operations=10`` for the annotation
    expert, whose targets hold up to 10 operations)."""
    from memrl.agents.membuilder import MemBuilderConfig
    from memrl.agents.membuilder.annotations import AnnotationsConfig
    from memrl.agents.membuilder.config import prompt_options
    from memrl.config import parse_options

    cfg = AnnotationsConfig if args.expert == "annotations" else MemBuilderConfig
    return prompt_options(parse_options(cfg, args.agent_option))


def save_epoch(trainer: Any, args: argparse.Namespace, epoch: int, step: int, val_loss: float | None) -> Path:
    """``OUTPUT_DIR/epoch-K/``: the adapter after epoch K in bfloat16 with its adapter.json (base model,
    shape, epoch, step, validation loss), written beside and renamed, so a folder that exists is whole."""
    import shutil

    from memrl.train.lora import save_adapter

    folder = Path(args.output_dir) / f"epoch-{epoch}"
    tmp = folder.with_name(folder.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_adapter(trainer.model, tmp, trainer.base_name, dtype="bfloat16", agent_options=agent_options(args),
                 epoch=epoch, step=step, val_loss=None if val_loss is None else round(val_loss, 4))  # fmt: skip
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    print(f"adapter after epoch {epoch} kept in {folder}", flush=True)
    return folder


def subset(samples: list, n: int, seed: int) -> list:
    """At most ``n`` of ``samples`` (all when ``n`` <= 0), a fixed seeded choice kept in order: the same
    examples before and after training, and at every validation."""
    if n <= 0 or len(samples) <= n:
        return list(samples)
    keep = sorted(random.Random(seed).sample(range(len(samples)), n))
    return [samples[i] for i in keep]


def expert_source(args: argparse.Namespace, convs: list) -> dict[str, Any]:
    """What the expert's trajectories depend on: a kept file is reused only when all of it matches."""
    return {
        "dataset": args.dataset, "conversations": [c.id for c in convs], "sessions": args.sessions,
        "val_conversations": sorted(set(args.val_conv)), "expert": args.expert,
        "expert_provider": args.expert_provider if args.expert == "model" else None,
        "expert_model": args.expert_model if args.expert == "model" else None,
        "agent_option": sorted(args.agent_option), "embedder": args.embedder,
        # the options resolved, defaults included: a file built under other defaults (before issue 61's
        # core_skip, dedupe, interleave) is not the same data, so it is built again, not reused
        "agent_config": resolved_agent_config(args),
    }  # fmt: skip


def resolved_agent_config(args: argparse.Namespace) -> dict[str, Any]:
    import dataclasses

    from memrl.agents.membuilder import MemBuilderConfig
    from memrl.agents.membuilder.annotations import AnnotationsConfig
    from memrl.config import parse_options

    cfg = parse_options(
        AnnotationsConfig if args.expert == "annotations" else MemBuilderConfig, args.agent_option
    )
    return json.loads(json.dumps(dataclasses.asdict(cfg)))


def write_expert(out: Path, source: dict, trajs: list, val: list, failures: int) -> None:
    """``OUTPUT_DIR/expert.jsonl``: a header (source, failures, counts), then one trajectory per line;
    written to a temporary file and renamed, so a file that exists is whole."""
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (EXPERT_FILE + ".tmp")
    with tmp.open("w") as f:
        f.write(
            json.dumps({"source": source, "failures": failures, "train": len(trajs), "val": len(val)}) + "\n"
        )
        for split, items in (("train", trajs), ("val", val)):
            for t in items:
                f.write(json.dumps({"split": split, "trajectory": t.to_dict()}) + "\n")
    tmp.replace(out / EXPERT_FILE)


def read_expert(out: Path, source: dict, *, resume: bool = False) -> tuple[list, list, int] | None:
    """The kept trajectories of ``source`` (train, val, failures), or None when there are none for it.
    A resumed run must train on the examples it started with: kept trajectories of another source are an
    error then, not rebuilt."""
    from memrl.agents.trajectory import Trajectory
    from memrl.errors import ConfigError, DataError

    path = out / EXPERT_FILE
    if not path.is_file():
        return None
    with path.open() as f:
        lines = f.read().splitlines()
    try:
        head = json.loads(lines[0])
        if head.get("source") != source:
            if resume:
                raise ConfigError(
                    f"--resume: {path} was built from another selection or expert "
                    f"({head.get('source')}); resume with the same options, or use another --output-dir"
                )
            return None
        rows = [json.loads(x) for x in lines[1:]]
        trajs = [Trajectory.from_dict(r["trajectory"]) for r in rows if r["split"] == "train"]
        val = [Trajectory.from_dict(r["trajectory"]) for r in rows if r["split"] == "val"]
    except (json.JSONDecodeError, KeyError, TypeError, IndexError, ValueError) as e:
        raise DataError(
            f"{path}: not a file of expert trajectories ({e}); delete it to build them again"
        ) from e
    if (len(trajs), len(val)) != (head["train"], head["val"]):
        raise DataError(
            f"{path}: {len(trajs)}/{len(val)} trajectories, the header says {head['train']}/{head['val']}"
        )
    return trajs, val, int(head["failures"])
