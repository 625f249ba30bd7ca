"""Benchmark of memory builders on one LoCoMo conversation: what building memory costs, and what it is worth.

Builders compared (``--builders``), each into a fresh store in its own temporary folder:

- ``membuilder-full``: the four MemBuilder agents, each shown the whole memory (the original);
- ``membuilder-retrieved``: the same agents, each shown core memory plus the ``--context-k`` items of its
  own type most relevant to the session (:mod:`memrl.agents.membuilder`, the default);
- ``raw``: every turn stored as it is, no LLM (:mod:`memrl.agents.raw`).

Per builder: wall time of the build, LLM calls and prompt/completion tokens per session, the share of valid
answers (answers that parsed / agent calls) and of valid actions (applied / proposed), answers cut at
max_tokens, items stored; then LoCoMo QA F1 of questions about the built sessions, answered by the same
model from core memory + the top ``--top-k`` retrieved memories (:class:`memrl.eval.qa.QAEvaluation`,
``mode="answer"`` on the store just built). Models run one at a time (builders in sequence).

Run (data from ``$MEMRL_DATA_DIR``, never copied into the repository)::

    MEMRL_DATA_DIR=/work/shared/data .venv/bin/python -m bench.agents            # conv-26, 4 sessions
    MEMRL_DATA_DIR=/work/shared/data .venv/bin/python -m bench.agents --sessions 2 --questions 10
    .venv/bin/python -m bench.agents --smoke      # plumbing check in seconds: scripted LLM, hashing embedder

``--replay`` (on by default; cheap) adds a cost projection over the *whole* conversation without generating:
a scripted model writes LoCoMo's own annotations (observations, events) as its memory, so memory grows as
a good builder's would, and the prompts of ``full`` and ``retrieved`` context are counted with the offline
model's tokenizer.

A table is printed at the end; the last line of stdout is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from memrl.agents.base import SessionResult, create_builder
from memrl.agents.membuilder import MemBuilderAgent, MemBuilderConfig
from memrl.data.types import Conversation
from memrl.eval.qa import QAEvaluation
from memrl.eval.qa.config import QAEvalConfig, load_conversations
from memrl.memory.facade.memory import AsyncMemory

BUILDERS = ("membuilder-full", "membuilder-retrieved", "raw")


def scripted_llm() -> Any:
    """For --smoke: valid minimal answers for the agents, a fixed reply for questions."""
    from memrl.llm.scripted import ScriptedLLM

    def reply(messages: list[dict[str, Any]], tools: Any, json_schema: Any) -> str:
        if json_schema is None:
            return "not mentioned"
        last = messages[-1]["content"]
        line = max(last.splitlines(), key=len)[:150]
        if "Rewrite it in under" in last:
            return json.dumps({"operation": "REWRITE", "content": line})
        if "operations" not in json.dumps(json_schema):
            return json.dumps({"operation": "APPEND", "content": line})
        return json.dumps({"operations": [{"operation": "ADD", "memory": line}]})

    return ScriptedLLM(reply)


def make_builder(name: str, llm: Any, args: argparse.Namespace) -> Any:
    if name == "raw":
        return create_builder("raw")
    context = name.split("-", 1)[1]
    return MemBuilderAgent(llm, MemBuilderConfig(context=context, context_k=args.context_k))  # type: ignore[arg-type]


def build_figures(results: list[SessionResult], seconds: float) -> dict[str, Any]:
    """Cost and validity figures of one builder's sessions."""
    n = len(results) or 1
    stats = [r.stats for r in results]
    calls = sum(s.get("agent_calls", 0) for s in stats)
    parsed = sum(s.get("parsed", 0) for s in stats)
    proposed = sum(s.get("actions_proposed", 0) for s in stats)
    applied = sum(s.get("actions_applied", 0) for s in stats)
    agents = [a for s in stats for a in s.get("agents", {}).values()]
    return {
        "sessions": len(results),
        "build_s": round(seconds, 1),
        "build_s_per_session": round(seconds / n, 1),
        "llm_calls": sum(r.llm_calls for r in results),
        "prompt_tokens_per_session": round(sum(r.prompt_tokens for r in results) / n),
        "completion_tokens_per_session": round(sum(r.completion_tokens for r in results) / n),
        "prompt_tokens_last_session": results[-1].prompt_tokens if results else 0,
        "valid_answers": round(parsed / calls, 3) if calls else None,
        "valid_actions": round(applied / proposed, 3) if proposed else None,
        "actions_applied": applied,
        "cut_at_max_tokens": sum(1 for a in agents if a.get("finish_reason") == "length"),
        "failures": sum(len(r.failures) for r in results),
        "compressions": sum(1 for s in stats if s.get("compressed")),
        "items": stats[-1].get("items") if stats and "items" in stats[-1] else None,
    }


async def run_builder(
    name: str, llm: Any, conv: Conversation, args: argparse.Namespace, out: Path
) -> dict[str, Any]:
    cfg = QAEvalConfig(
        dataset=args.dataset,
        conv_id=(conv.id,),
        sessions=args.sessions,
        questions=args.questions,
        builder="raw" if name == "raw" else "membuilder",
        mode="answer",
        provider="scripted" if args.smoke else "local",
        output_dir=str(out),
        db_path=str(out / "memory.db"),
        top_k=args.top_k,
        embedder=args.embedder,
        concurrency=args.concurrency,
        cache=False,
    )
    out.mkdir(parents=True, exist_ok=True)
    builder = make_builder(name, llm, args)
    memory = AsyncMemory(cfg.db_path, embedder=cfg.embedder)
    results = []
    t0 = time.perf_counter()
    try:
        for s in conv.sessions:
            r = await builder.build_session(memory, cfg.namespace(conv), conv, s)
            results.append(r)
            print(f"  {name} session {s.index}: {r.seconds:.1f} s, {r.llm_calls} calls, "
                  f"{r.prompt_tokens}+{r.completion_tokens} tokens, {len(r.failures)} failures", flush=True)  # fmt: skip
        build_s = time.perf_counter() - t0
        items = await memory.count(namespace=cfg.namespace(conv))
        core = await memory.core(namespace=cfg.namespace(conv))
    finally:
        await memory.close()
    figures = build_figures(results, build_s)
    figures.update(items=items, core_chars=len(core))
    t1 = time.perf_counter()
    summary = await QAEvaluation(cfg, llm=llm, progress=False).run()
    figures.update(
        questions=summary["n_answered"],
        answer_failures=summary["n_answer_failures"],
        f1=round(summary["f1"], 4) if summary["f1"] is not None else None,
        f1_ci=[round(x, 4) for x in summary["f1_ci"]] if summary["f1"] is not None else None,
        evidence_recall=summary.get("evidence_recall"),
        answer_s=round(time.perf_counter() - t1, 1),
    )
    return figures


def replay_llm(conv: Conversation, tokenizer: Any) -> Any:
    """For --replay: a scripted model that writes LoCoMo's own annotations as its memory (the offline SFT
    expert's actions, :func:`memrl.agents.membuilder.experts.annotation_action`), so memory grows the way a
    good builder's would, and counts tokens with the offline model's tokenizer. Nothing is generated: it
    measures what the prompts of each context mode cost over a whole conversation."""
    from memrl.agents.membuilder.experts import annotation_action
    from memrl.llm.base import ChatResponse, Usage
    from memrl.llm.scripted import ScriptedLLM

    def reply(messages: list[dict[str, Any]], tools: Any, json_schema: Any) -> ChatResponse:
        text = json.dumps(annotation_action(conv, messages))
        chat = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt = len(tokenizer(chat, add_special_tokens=False)["input_ids"])
        return ChatResponse(text=text, usage=Usage(prompt, len(tokenizer(text)["input_ids"])))

    return ScriptedLLM(reply)


async def replay(conv: Conversation, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Prompt tokens per session of full vs retrieved context over every session of ``conv``."""
    from transformers import AutoTokenizer

    from memrl.llm.local.hf_models import ensure_local_model

    tokenizer = AutoTokenizer.from_pretrained(ensure_local_model(None))
    out: dict[str, Any] = {"sessions": len(conv.sessions)}
    for context in ("full", "retrieved"):
        agent = MemBuilderAgent(
            replay_llm(conv, tokenizer), MemBuilderConfig(context=context, context_k=args.context_k)
        )  # type: ignore[arg-type]
        memory = AsyncMemory(tmp / f"replay-{context}.db", embedder=args.embedder)
        try:
            results = [await agent.build_session(memory, "replay", conv, s) for s in conv.sessions]
            items = await memory.count(namespace="replay")
        finally:
            await memory.close()
        per = [r.prompt_tokens for r in results]
        out[context] = {
            "prompt_tokens_per_session": round(sum(per) / len(per)),
            "prompt_tokens_first_session": per[0],
            "prompt_tokens_last_session": per[-1],
            "prompt_tokens_total": sum(per),
            "items": items,
            "compressions": sum(1 for r in results if r.stats.get("compressed")),
        }
    out["retrieved_over_full"] = round(
        out["retrieved"]["prompt_tokens_total"] / out["full"]["prompt_tokens_total"], 3
    )
    return out


def print_table(figures: dict[str, dict[str, Any]]) -> None:
    cols = [
        ("builder", 22), ("build_s", 8), ("llm_calls", 9), ("prompt_tokens_per_session", 10),
        ("completion_tokens_per_session", 10), ("valid_answers", 8), ("valid_actions", 8),
        ("cut_at_max_tokens", 5), ("items", 6), ("f1", 7), ("questions", 5),
    ]  # fmt: skip
    heads = ["builder", "build s", "calls", "prompt/s", "compl/s", "parsed", "applied", "cut", "items",
             "F1", "q"]  # fmt: skip
    print(
        " ".join(
            h.rjust(w) if i else h.ljust(w) for i, (h, (_, w)) in enumerate(zip(heads, cols, strict=True))
        )
    )
    for name, f in figures.items():
        row = [name.ljust(cols[0][1])]
        for key, width in cols[1:]:
            v = f.get(key)
            row.append(("-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)).rjust(width))
        print(" ".join(row))


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from memrl.llm import create_llm

    probe = QAEvalConfig(dataset=args.dataset, conv_id=(args.conv_id,), sessions=args.sessions,
                         questions=args.questions)  # fmt: skip
    conv = load_conversations(probe)[0]
    print(f"{conv.id}: {len(conv.sessions)} sessions, {sum(len(s.turns) for s in conv.sessions)} turns, "
          f"{len(conv.questions)} questions", flush=True)  # fmt: skip
    llm = scripted_llm() if args.smoke else create_llm("local")
    for name in args.builders:  # fail fast (an import error, a bad option) before any model runs
        make_builder(name, llm, args)
    t0 = time.perf_counter()
    if not args.smoke:
        llm.load()
    load_s = time.perf_counter() - t0
    figures: dict[str, dict[str, Any]] = {}
    replayed = None
    with tempfile.TemporaryDirectory(prefix="memrl-bench-agents-") as tmp:
        for name in args.builders:
            print(f"{name}:", flush=True)
            try:
                figures[name] = await run_builder(name, llm, conv, args, Path(tmp) / name)
            except Exception as e:  # one broken builder must not lose the others' figures
                figures[name] = {"error": f"{type(e).__name__}: {e}"}
            print(f"  -> {json.dumps(figures[name])}", flush=True)
        if args.replay:
            whole = load_conversations(dataclasses.replace(probe, sessions=None))[0]
            print(
                f"replay ({len(whole.sessions)} sessions, annotations as memory, no generation):", flush=True
            )
            replayed = await replay(whole, args, Path(tmp))
            print(f"  -> {json.dumps(replayed)}", flush=True)
    print()
    print_table(figures)
    cfg = MemBuilderConfig(context_k=args.context_k)
    return {
        "bench": "agents",
        "conversation": conv.id,
        "sessions": len(conv.sessions),
        "turns": sum(len(s.turns) for s in conv.sessions),
        "questions": len(conv.questions),
        "model": "scripted" if args.smoke else getattr(llm, "model", "local"),
        "embedder": args.embedder,
        "top_k": args.top_k,
        "membuilder": {
            "context_k": cfg.context_k,
            "max_operations": cfg.max_operations,
            "max_item_chars": cfg.max_item_chars,
            "max_tokens": cfg.answer_budget,
        },  # fmt: skip
        "model_load_s": round(load_s, 1),
        "machine": f"{platform.machine()} {platform.system()}",
        "builders": figures,
        "replay": replayed,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", default="locomo", help="locomo (needs $MEMRL_DATA_DIR) or sample")
    p.add_argument("--conv-id", default="conv-26", help="the conversation (LoCoMo sample id)")
    p.add_argument("--sessions", type=int, default=4, help="build the first N sessions (default: 4)")
    p.add_argument(
        "--questions", type=int, default=None, help="at most N questions (default: all about them)"
    )
    p.add_argument(
        "--builders", default=",".join(BUILDERS), help=f"comma-separated, among {', '.join(BUILDERS)}"
    )
    p.add_argument("--context-k", type=int, default=8, help="membuilder-retrieved: items of each type shown")
    p.add_argument("--top-k", type=int, default=10, help="memories retrieved per question")
    p.add_argument("--embedder", default="minilm", help="memory search embedder (minilm, hashing)")
    p.add_argument("--concurrency", type=int, default=8, help="questions answered at once (one batch)")
    p.add_argument(
        "--replay", action=argparse.BooleanOptionalAction, default=True,
        help="also replay LoCoMo's annotations as memory over the whole conversation and count the prompt "
        "tokens of full vs retrieved context (no generation; a few seconds)",
    )  # fmt: skip
    p.add_argument("--smoke", action="store_true", help="scripted LLM, hashing embedder, sample conversation")
    args = p.parse_args(argv)
    args.builders = [b.strip() for b in args.builders.split(",") if b.strip()]
    unknown = [b for b in args.builders if b not in BUILDERS]
    if unknown:
        p.error(f"unknown builders {unknown}; choose among {', '.join(BUILDERS)}")
    if args.smoke:
        args.dataset, args.conv_id, args.embedder = "sample", "sample-1", "hashing"
        args.replay = False
    return args


if __name__ == "__main__":
    result = asyncio.run(main(parse_args()))
    print(json.dumps(result))
