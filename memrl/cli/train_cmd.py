"""``memrl train``: the local RL loop (GRPO/DAPO) on one machine, with the local back-end.

memrl train memagent --dataset sample --steps 20 --group-size 8 --output-dir runs/memagent
memrl train memagent --dataset locomo --model path/to/hf-folder --lr 1e-6 --kl-coef 0.001 --resume
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from memrl.cli.common import add_conversation_args
from memrl.config import add_arguments


def register(sub: argparse._SubParsersAction) -> None:
    from memrl.agents.memagent import MemAgentConfig
    from memrl.train.loop import LoopConfig
    from memrl.train.trainer import TrainerConfig

    train = sub.add_parser("train", help="train an agent with RL on this machine (local model)")
    tasks = train.add_subparsers(dest="task", metavar="AGENT")
    tasks.required = True
    p = tasks.add_parser(
        "memagent", help="MemAgent: read a conversation chunk by chunk, answer; reward 1 if right"
    )
    add_conversation_args(p)
    p.add_argument("--all-conversations", action="store_true", help="questions of every conversation")
    p.add_argument(
        "--reward", default="reward", choices=["reward", "f1", "sub_em", "f1_unboxed"],
        help="the original's boxed-answer match (0/1); f1 or sub_em of the boxed answer (denser); "
             "f1_unboxed: F1 of the whole reply when it has no box (for models that never box)",
    )  # fmt: skip
    p.add_argument("--model", help="HF folder or hub id (default: the offline SmolLM2-135M-Instruct)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--resume", action="store_true", help="continue from OUTPUT_DIR/checkpoint")
    p.add_argument("--json", action="store_true")
    add_arguments(p.add_argument_group("loop"), LoopConfig)
    add_arguments(p.add_argument_group("update"), TrainerConfig)
    add_arguments(p.add_argument_group("memagent"), MemAgentConfig, skip=("temperature", "initial_memory"))
    p.set_defaults(func=_memagent)

    from memrl.train.sft import SFTConfig

    p = tasks.add_parser(
        "sft-membuilder",
        help="MemBuilder: fine-tune the local model on an expert's answers (SFT before ADRPO)",
    )
    add_conversation_args(p)
    p.add_argument("--all-conversations", action="store_true", help="every conversation of the data set")
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
    p.add_argument("--output-dir", default="runs/sft")
    p.add_argument("--json", action="store_true")
    add_arguments(p.add_argument_group("sft"), SFTConfig)
    p.set_defaults(func=_sft_membuilder)


def _sft_membuilder(args: argparse.Namespace) -> int:
    import asyncio

    from memrl.agents.experts import annotation_expert
    from memrl.agents.membuilder import MemBuilderAgent
    from memrl.cli.common import load_conversation
    from memrl.config import from_args
    from memrl.data import load_dataset
    from memrl.errors import ConfigError
    from memrl.llm import create_llm
    from memrl.llm.local import LocalLLM
    from memrl.memory.facade import AsyncMemory
    from memrl.train.sft import SFTConfig, SFTTrainer, sft_samples

    if args.expert == "model" and not args.expert_model:
        raise ConfigError("--expert model needs --expert-model (and --base-url for a local server)")
    convs = (
        load_dataset(args.dataset, args.data_path)[0] if args.all_conversations else [load_conversation(args)]
    )

    async def expert_trajectories() -> tuple[list, int]:
        trajs, failures = [], 0
        for conv in convs:
            if args.expert == "annotations":
                expert = annotation_expert(conv)
            else:
                kw = {"base_url": args.base_url} if args.base_url else {}
                expert = create_llm(args.expert_provider, args.expert_model, **kw)
            memory = AsyncMemory(":memory:", embedder=args.embedder)
            try:
                agent = MemBuilderAgent(expert)
                for session in conv.sessions[: args.sessions] if args.sessions else conv.sessions:
                    result = await agent.build_session(memory, conv.id, conv, session)
                    trajs += result.trajectories
                    failures += len(result.failures)
            finally:
                await memory.close()
        return trajs, failures

    trajs, expert_failures = asyncio.run(expert_trajectories())
    cfg = from_args(SFTConfig, args)
    student = LocalLLM(args.model, device=args.device).load()
    samples, skipped = sft_samples(student, trajs, cfg.max_seq_tokens)
    trainer = SFTTrainer(student, cfg)
    before, n_tokens = trainer.loss_on(samples)
    rows = trainer.fit(samples, args.output_dir)
    after, _ = trainer.loss_on(samples)
    summary = {
        "conversations": len(convs), "expert": args.expert, "expert_trajectories": len(trajs),
        "expert_failures": expert_failures, "examples": len(samples), "skipped": skipped,
        "target_tokens": n_tokens, "steps": len(rows), "loss_before": round(before, 4),
        "loss_after": round(after, 4), "checkpoint": str(Path(args.output_dir) / "checkpoint"),
    }  # fmt: skip
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"SFT on {len(samples)} expert answers ({n_tokens} target tokens), {len(rows)} steps: loss per "
              f"target token {before:.3f} -> {after:.3f} (on the training examples); skipped {skipped}; "
              f"checkpoint {summary['checkpoint']} (use it with --provider local --model)")  # fmt: skip
    return 0


def _memagent(args: argparse.Namespace) -> int:
    from memrl.agents.memagent import MemAgentConfig
    from memrl.cli.common import load_conversation
    from memrl.config import from_args
    from memrl.data import load_dataset
    from memrl.llm.local import LocalLLM
    from memrl.train.loop import LoopConfig, MemAgentTasks, train
    from memrl.train.trainer import TrainerConfig, checkpoint_folder

    loop = from_args(LoopConfig, args)
    convs = (
        load_dataset(args.dataset, args.data_path)[0] if args.all_conversations else [load_conversation(args)]
    )
    tasks = MemAgentTasks(convs, from_args(MemAgentConfig, args), reward=args.reward)
    checkpoint = Path(loop.output_dir) / "checkpoint"
    found = checkpoint_folder(checkpoint) if args.resume else None
    model = str(found) if found is not None else args.model
    llm = LocalLLM(model, device=args.device).load()
    rows = train(llm, tasks, loop, from_args(TrainerConfig, args), resume=args.resume)
    last = rows[-1]
    summary = {
        "steps": int(last["step"]), "tasks": len(tasks), "output_dir": loop.output_dir,
        "checkpoint": str(checkpoint), "reward_mean_first": rows[0]["reward_mean"],
        "reward_mean_last": last["reward_mean"], "skipped_steps": sum(int(r["skipped"]) for r in rows),
    }  # fmt: skip
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"trained {summary['steps']} steps on {len(tasks)} questions; mean reward "
              f"{summary['reward_mean_first']:.3f} (step 1) -> {summary['reward_mean_last']:.3f} (step {summary['steps']}); "
              f"{summary['skipped_steps']} steps without signal; checkpoint {checkpoint}; report {loop.output_dir}/report.md")  # fmt: skip
    return 0
