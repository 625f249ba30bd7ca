"""``memrl build``, ``memrl update``, ``memrl read``: run one agent on one conversation or document.

memrl build --dataset locomo --conv-id conv-26 --builder membuilder --db mem.db --sessions 2
memrl update --db mem.db --namespace conv-26 --dataset locomo --conv-id conv-26
memrl read --document book.txt --question "Who wrote the letter?"
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from pathlib import Path

from memrl.cli.common import (
    add_conversation_args,
    add_llm_args,
    add_store_args,
    emit_json,
    load_conversation,
    make_llm,
)
from memrl.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("build", help="build memory for a conversation, session by session")
    add_conversation_args(p)
    p.add_argument("--builder", default="membuilder", choices=["membuilder", "raw"])
    p.add_argument("--sessions", type=int, help="only the first N sessions")
    p.add_argument(
        "--context", choices=["retrieved", "full"], help="membuilder: memory state each agent sees"
    )
    p.add_argument(
        "--adrpo", action="store_true",
        help="membuilder: after each session, answer and judge up to 5 of the data set's questions about it "
             "and give each agent its ADRPO reward (an answer counts as correct when its official F1 >= 0.5, "
             "or when --judge-model says so)",
    )  # fmt: skip
    p.add_argument("--judge-model", help="--adrpo: an LLM judge (same provider) instead of F1 >= 0.5")
    p.add_argument("--trajectories", help="write every agent trajectory (with its reward) to this JSONL file")
    p.add_argument("--json", action="store_true")
    add_store_args(p, namespace_default=None)
    add_llm_args(p)
    p.set_defaults(func=_build)

    p = sub.add_parser("update", help="let the MemUpdate agent edit a namespace with its six tools")
    add_conversation_args(p)
    p.add_argument("--question", help="focus the edits on this question")
    p.add_argument("--max-tool-calls", type=int, default=30)
    p.add_argument("--json", action="store_true")
    add_store_args(p, namespace_default=None)
    add_llm_args(p)
    p.set_defaults(func=_update)

    p = sub.add_parser("read", help="MemAgent: read a long document chunk by chunk, then answer")
    p.add_argument("--document", help="text file to read (default: the conversation, rendered)")
    add_conversation_args(p)
    p.add_argument("--question", required=True)
    p.add_argument("--chunk-tokens", type=int, default=5000)
    p.add_argument("--memory-tokens", type=int, default=1024)
    p.add_argument("--json", action="store_true")
    add_llm_args(p)
    p.set_defaults(func=_read)


def _build(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from memrl.agents.base import create_builder
    from memrl.memory import AsyncMemory

    conv = load_conversation(args)
    ns = args.namespace or conv.id
    sessions = conv.sessions[: args.sessions] if args.sessions else conv.sessions

    if args.adrpo and args.builder != "membuilder":
        raise ConfigError("--adrpo rewards MemBuilder's agents; use --builder membuilder")

    async def run() -> list:
        from memrl.agents.membuilder.adrpo import decoy_questions, score_session, session_questions

        llm = None if args.builder == "raw" else make_llm(args)
        kw = {} if llm is None else {"llm": llm}
        if args.context and args.builder == "membuilder":
            from memrl.agents.membuilder import MemBuilderConfig

            kw["config"] = MemBuilderConfig(context=args.context)
        builder = create_builder(args.builder, **kw)
        judge = None  # the official metric >= 0.5 decides (a small model is a lenient judge)
        if args.adrpo and args.judge_model:
            judge = make_llm(argparse.Namespace(**{**vars(args), "model": args.judge_model}))
        memory = AsyncMemory(args.db, embedder=args.embedder)
        results = []
        try:
            for s in tqdm(sessions, desc=f"build {conv.id}", unit="session"):
                result = await builder.build_session(memory, ns, conv, s)
                if args.adrpo:
                    qs = session_questions(conv, s)
                    score = await score_session(memory, ns, conv, result, qs, answer_llm=llm, judge_llm=judge,
                                                decoys=decoy_questions(conv, s, qs))  # fmt: skip
                    result.stats["adrpo"] = score.to_dict()
                results.append(result)
            if args.trajectories:
                with open(args.trajectories, "a") as f:
                    for r in results:
                        for t in r.trajectories:
                            f.write(json.dumps(t.to_dict(), ensure_ascii=False) + "\n")
            counts = Counter(i.type.value for i in await memory.list(namespace=ns))
            core = await memory.core(namespace=ns)
        finally:
            await memory.close()
        return [results, counts, core]

    results, counts, core = asyncio.run(run())
    summary = {
        "conversation": conv.id, "namespace": ns, "db": args.db, "sessions": len(results),
        "items": dict(counts), "core_chars": len(core),
        "llm_calls": sum(r.llm_calls for r in results),
        "prompt_tokens": sum(r.prompt_tokens for r in results),
        "completion_tokens": sum(r.completion_tokens for r in results),
        "failures": [f for r in results for f in r.failures],
    }  # fmt: skip
    if args.builder == "membuilder":  # how well the model used its actions
        for key in ("agent_calls", "parsed", "actions_proposed", "actions_applied"):
            summary[key] = sum(r.stats.get(key, 0) for r in results)
    if args.adrpo:
        summary["adrpo"] = [r.stats["adrpo"] for r in results]
    if args.json:
        emit_json(summary)
    else:
        print(f"built {summary['sessions']} sessions of {conv.id} into {args.db} [{ns}]: items {dict(counts)}, "
              f"core memory {len(core)} chars; {summary['llm_calls']} LLM calls, "
              f"{summary['prompt_tokens']}+{summary['completion_tokens']} tokens, {len(summary['failures'])} failures")  # fmt: skip
        for a in summary.get("adrpo", []):
            rewards = ", ".join(f"{t} {'-' if v is None else f'{v:.2f}'}" for t, v in a["rewards"].items())
            print(f"  session {a['session']}: {a['n_correct']}/{len(a['questions'])} correct "
                  f"({a['n_failed']} failed), dominant {a['dominant']}; rewards: {rewards}")  # fmt: skip
    return 0


def _update(args: argparse.Namespace) -> int:
    from memrl.agents.memupdate import MemUpdateConfig, update_memory
    from memrl.data.types import Question
    from memrl.memory import AsyncMemory

    conv = load_conversation(args)
    ns = args.namespace or conv.id
    question = None
    if args.question:  # one of the conversation's questions, or a free one
        question = next((q for q in conv.questions if q.question == args.question), None)
        question = question or Question("cli", args.question, (), "free", None, (), ())

    async def run():
        memory = AsyncMemory(args.db, embedder=args.embedder)
        try:
            return await update_memory(
                make_llm(args, progress="update (LLM calls)"), memory, ns, conv,
                config=MemUpdateConfig(max_tool_calls=args.max_tool_calls),
                question=question,
            )  # fmt: skip
        finally:
            await memory.close()

    result = asyncio.run(run())
    data = result.to_dict()
    if args.json:
        emit_json(data)
    else:
        print(" ".join(f"{k}={v}" for k, v in data.items() if not isinstance(v, (list, dict))))
        for f in result.failures:
            print(f"failure: {f}", file=sys.stderr)
    # the episode stopped on a provider failure: the store holds what it did before (undoable), exit 1
    return 1 if result.stop_reason == "failure" else 0


def _read(args: argparse.Namespace) -> int:
    from memrl.agents.memagent import MemAgent, MemAgentConfig, render_conversation

    document = (
        Path(args.document).read_text() if args.document else render_conversation(load_conversation(args))
    )
    config = MemAgentConfig(chunk_tokens=args.chunk_tokens, memory_tokens=args.memory_tokens)
    agent = MemAgent(make_llm(args, progress="read (LLM calls)"), config)
    result = asyncio.run(agent.run(args.question, document))
    failure = result.trajectory.failure
    data = {"answer": result.answer, "final_text": result.final_text, "memory": result.memory,
            "chunks_read": result.chunks_read, "failure": failure}  # fmt: skip
    if args.json:
        emit_json(data)
    else:
        print(
            f"read {result.chunks_read} chunks\n--- memory ---\n{result.memory}\n--- answer ---\n{result.final_text}"
        )
        if failure:
            print(f"failure: {failure}", file=sys.stderr)
    return 1 if failure else 0
