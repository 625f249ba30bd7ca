"""``memrl train``: the local RL loop (GRPO/DAPO/ADRPO) on one machine, with the local back-end.

memrl train grpo --task answer --dataset locomo --split train --steps 40 --lora-rank 16 --lr 2e-4
memrl train grpo --task read|update|build --dataset sample --steps 20 --output-dir runs/x [--resume]
memrl train grpo --task answer --dataset locomo --split fit --eval-split validation --eval-every 5
memrl train memagent ...          (= grpo --task read)
memrl train sft-membuilder --dataset locomo --conv-id conv-30 --output-dir runs/sft [--resume]
memrl train sft-membuilder --dataset locomo --split train --val-conv conv-49 --lora-rank 16 --lr 2e-4

Agent settings are ``--agent-option KEY=VALUE`` (fields of MemAgentConfig, MemUpdateConfig or
MemBuilderConfig for read, update and build).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from memrl.cli.common import add_conversation_args
from memrl.cli.train_data import _conversations, add_split_guard, write_run_meta  # noqa: F401 (re-exported)
from memrl.config import add_arguments


def register(sub: argparse._SubParsersAction) -> None:
    from memrl.train.loop import LoopConfig
    from memrl.train.trainer import TrainerConfig

    train = sub.add_parser("train", help="train an agent with RL on this machine (local model)")
    tasks = train.add_subparsers(dest="task_cmd", metavar="COMMAND")
    tasks.required = True
    for name, help_ in (
        ("grpo", "GRPO/DAPO (ADRPO for build) on one of the agents: --task read|answer|update|build"),
        ("memagent", "alias of grpo --task read: MemAgent reads chunk by chunk, answers in \\boxed{}"),
    ):
        p = tasks.add_parser(name, help=help_)
        if name == "grpo":
            p.add_argument("--task", required=True, choices=["read", "answer", "update", "build"],
                           help="read: MemAgent; answer: QA from a store's top-k memories; update: MemUpdate; "
                                "build: MemBuilder (ADRPO)")  # fmt: skip
        else:  # the old command keeps its flags (MemAgentConfig's, defaults as before)
            from memrl.agents.memagent import MemAgentConfig

            p.set_defaults(task="read", memagent_flags=True)
            add_arguments(
                p.add_argument_group("memagent"), MemAgentConfig, skip=("temperature", "initial_memory")
            )
        add_conversation_args(p)
        p.add_argument("--all-conversations", action="store_true",
                       help="every conversation of the data set's training split (all of them with "
                            "--allow-eval-split)")  # fmt: skip
        p.add_argument("--split", help="an original split: LoCoMo train|test (MemUpdate's 7/3), LongMemEval "
                                       "sft|rl|test (MemBuilder's). Default: the training split (train, rl)")  # fmt: skip
        add_split_guard(p)
        p.add_argument("--questions", type=int, help="at most this many questions per conversation")
        p.add_argument("--eval-split", help="held-out items scored while training (before the first step, "
                       "every --eval-every steps, after the last; memrl.train.heldout): a split of the data "
                       "set the run does not train on, e.g. LoCoMo validation; an evaluation split (test) "
                       "only with --allow-eval-split")  # fmt: skip
        p.add_argument("--eval-questions", type=int,
                       help="held-out: at most this many questions per conversation (default: --questions)")  # fmt: skip
        p.add_argument("--lengths", nargs="+", default=[],
                       help="ruler-locomo / ruler-hotpotqa: document length(s) to build, e.g. 1k (default 7k)")  # fmt: skip
        p.add_argument(
            "--reward", default="reward", choices=["reward", "f1", "em", "sub_em", "f1_unboxed", "values"],
            help="read: the original's boxed-answer match (0/1, the default); f1 or sub_em of the boxed answer "
                 "(denser training scores: list parts past the gold's count charged, one short answer); f1_unboxed: F1 "
                 "of the whole reply when it has no box; values: the box as a value set (precision x recall, for tasks asking "
                 "for several values such as niah_multivalue). answer: f1 (the default), em or sub_em; the "
                 "official metrics are logged, never rewarded",
        )  # fmt: skip
        p.add_argument("--top-k", type=int, default=10, help="answer: memories retrieved per question")
        p.add_argument("--max-answer-tokens", type=int, default=48, help="answer: token budget of an answer")
        p.add_argument("--embedder", default="minilm", help="answer/update/build: embedder of the store")
        p.add_argument(
            "--db-path",
            default=":memory:",
            help="answer: store file or postgresql:// URL (reused if already built)",
        )
        p.add_argument("--agent-option", action="append", default=[], metavar="KEY=VALUE",
                       help="read/update/build: a field of the agent's config (repeatable)")  # fmt: skip
        p.add_argument("--model", help="HF folder or hub id (default: the offline SmolLM2-135M-Instruct)")
        p.add_argument("--device", default="cpu")
        p.add_argument("--threads", type=int, help="torch threads (default: torch's)")
        p.add_argument("--resume", action="store_true", help="continue from OUTPUT_DIR/checkpoint")
        p.add_argument("--json", action="store_true")
        add_arguments(p.add_argument_group("loop"), LoopConfig)
        add_arguments(p.add_argument_group("update"), TrainerConfig)
        p.set_defaults(func=_grpo)

    from memrl.cli.sft_cmd import register_sft

    register_sft(tasks)


def make_tasks(args: argparse.Namespace, convs: list) -> object:
    """The task set of ``--task`` (see :mod:`memrl.train.tasks`)."""
    import dataclasses

    from memrl.config import parse_options
    from memrl.errors import ConfigError
    from memrl.train import tasks as T

    opts = list(args.agent_option)
    if args.task == "answer":
        if opts:
            raise ConfigError(
                "--agent-option is for read/update/build; answer takes --top-k, --max-answer-tokens"
            )
        reward = "f1" if args.reward == "reward" else args.reward
        if reward == "f1_unboxed":
            raise ConfigError(
                "--reward f1_unboxed is for read (boxed answers); answer takes f1, em or sub_em"
            )
        return T.AnswerTasks(convs, db_path=args.db_path, embedder=args.embedder, top_k=args.top_k,
                             max_tokens=args.max_answer_tokens, reward=reward)  # fmt: skip
    if args.task == "read":
        from memrl.agents.memagent import MemAgentConfig

        base = {"chunk_tokens": 1024, "memory_tokens": 256, "answer_tokens": 48, "answer_grammar": True}
        if getattr(args, "memagent_flags", False):  # memrl train memagent --chunk-tokens ...
            from memrl.config import from_args

            base = dataclasses.asdict(from_args(MemAgentConfig, args))
            base.pop("temperature")
        if args.reward == "em":
            raise ConfigError("--reward em is for answer; read's exact match is its default, --reward reward")
        return T.ReadTasks(convs, parse_options(MemAgentConfig, opts, **base), reward=args.reward)
    if args.task == "update":
        from memrl.agents.memupdate import MemUpdateConfig

        base = {"max_tool_calls": 4, "max_turns": 4, "max_tokens": 128, "sample_size": 5, "question_hits": 3}
        return T.UpdateTasks(convs, parse_options(MemUpdateConfig, opts, **base), embedder=args.embedder)
    from memrl.agents.membuilder import MemBuilderConfig
    from memrl.llm.local.packaged import trained_options

    trained = trained_options(getattr(args, "model", None))  # an adapter's own prompts (SFT before ADRPO)
    base = {} if trained else {"max_operations": 2, "max_item_chars": 120}  # else small, for a CPU
    opts = [*trained, *opts]  # then yours
    return T.BuildTasks(convs, parse_options(MemBuilderConfig, opts, **base), embedder=args.embedder)


def heldout_tasks(args: argparse.Namespace, convs: list) -> object | None:
    """The task set of ``--eval-split`` (None without it): the same task as training, on that split's
    conversations, which must not be among the training ones."""
    from memrl.errors import ConfigError

    if not getattr(args, "eval_split", None):
        return None
    held = argparse.Namespace(**{**vars(args), "split": args.eval_split, "conv_id": None,
                                 "all_conversations": False,
                                 "questions": args.eval_questions or args.questions})  # fmt: skip
    held_convs = _conversations(held)
    shared = sorted({c.id for c in held_convs} & {c.id for c in convs})
    if shared:
        raise ConfigError(f"--eval-split {args.eval_split} shares {len(shared)} conversations with the training "
                          f"items ({', '.join(shared[:3])}): held-out items must be held out")  # fmt: skip
    args.heldout_conversations = [c.id for c in held_convs]
    return make_tasks(held, held_convs)


def _grpo(args: argparse.Namespace) -> int:
    from memrl.config import from_args
    from memrl.llm.local import LocalLLM
    from memrl.train.loop import LoopConfig, train
    from memrl.train.trainer import PolicyTrainer, TrainerConfig, checkpoint_folder

    loop = from_args(LoopConfig, args)
    convs = _conversations(args)
    tasks = make_tasks(args, convs)
    heldout = heldout_tasks(args, convs)
    write_run_meta(args, convs, loop.output_dir)
    checkpoint = Path(loop.output_dir) / "checkpoint"
    found = checkpoint_folder(checkpoint) if args.resume else None
    model = PolicyTrainer.model_to_load(found) if found is not None else args.model
    llm = LocalLLM(
        model, device=args.device, threads=args.threads, max_batch_size=max(8, loop.group_size)
    ).load()
    rows = train(llm, tasks, loop, from_args(TrainerConfig, args), resume=args.resume, heldout=heldout)  # type: ignore[arg-type]
    last = rows[-1]
    summary = {
        "task": args.task, "steps": int(last["step"]), "tasks": len(tasks), "output_dir": loop.output_dir,  # type: ignore[arg-type]
        "checkpoint": str(checkpoint), "reward_mean_first": rows[0]["reward_mean"],
        "reward_mean_last": last["reward_mean"], "skipped_steps": sum(int(r["skipped"]) for r in rows),
        "kl_to_start_last": last.get("kl_to_start"), "heldout_reward_first": rows[0].get("heldout_reward_at_start"),
        "heldout_reward_last": last.get("heldout_reward"), "plot": str(Path(loop.output_dir) / "reward.png"),
    }  # fmt: skip
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"trained {args.task} for {summary['steps']} steps on {summary['tasks']} tasks; mean reward "
              f"{summary['reward_mean_first']:.3f} (step 1) -> {summary['reward_mean_last']:.3f} (step {summary['steps']}); "
              f"{summary['skipped_steps']} steps without signal; checkpoint {checkpoint}; report {loop.output_dir}/report.md")  # fmt: skip
        if summary["heldout_reward_last"] is not None:
            first = summary["heldout_reward_first"]
            print(f"held-out reward {'-' if first is None else f'{first:.3f}'} (start) -> "
                  f"{summary['heldout_reward_last']:.3f} (step {summary['steps']}); plot {summary['plot']}")  # fmt: skip
    return 0
