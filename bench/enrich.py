"""Benchmark of write-time enrichment (:mod:`memrl.agents.enrich`): how fast an LLM writes retrieval keys.

Builds the ``raw`` memory of the chosen LoCoMo conversations (hashing embedder: no dense model needed) and
runs the enrichment pass over their turns with the given LLM, ``--limit`` turns per conversation at most.
Use a fresh ``--cache`` file for a cold timing: the same file then makes ``memrl eval retrieval --enrich
... --enrich-cache FILE`` warm (the replies are looked up, not generated). Prints a few turns with the
keys written for them, and as the last line of stdout one JSON object (``turns``, ``time_s``,
``turns_per_s``, counts of enriched / empty / malformed / failed replies, the load average).

Run (under /work/cpu.lock on the shared machine)::

    HF_HUB_OFFLINE=1 MEMRL_DATA_DIR=/work/shared/data .venv/bin/python -m bench.enrich \\
        --conv-id conv-26 --limit 64 --cache /tmp/llm.db
    .venv/bin/python -m bench.enrich --llm openai:gpt-4o-mini --base-url http://localhost:8000/v1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

from memrl.agents.enrich import EnrichConfig, EnrichStats, enrich, llm_from_spec
from memrl.eval.retrieval import load_conversations
from memrl.eval.retrieval.config import RetrievalConfig
from memrl.eval.retrieval.search import build_conversation, namespace_of
from memrl.memory.facade.memory import AsyncMemory


async def main(args: argparse.Namespace) -> dict:
    config = RetrievalConfig(
        dataset="locomo", conv_id=tuple(args.conv_id), embedder="hashing", embed_cache="none"
    )
    convs = load_conversations(config)
    kw = {"max_batch_size": args.concurrency} if args.llm.startswith("local") else {}
    if args.threads and args.llm.startswith("local"):
        kw["threads"] = args.threads
    llm = llm_from_spec(args.llm, base_url=args.base_url, cache=args.cache, **kw)
    cfg = EnrichConfig(concurrency=args.concurrency, max_tokens=args.max_tokens)
    memory = AsyncMemory(":memory:", embedder="hashing")
    total = EnrichStats(namespace="*")
    examples = []
    t0 = time.perf_counter()
    try:
        for conv in convs:
            await build_conversation(memory, conv, config)
            stats = await enrich(memory, namespace_of(conv), llm, config=cfg, progress=True, limit=args.limit)
            total.add(stats)
            keys = await memory.get_keys(namespace=namespace_of(conv))
            for tid in list(keys)[: args.examples]:
                item = await memory.get(tid, namespace=namespace_of(conv))
                examples.append({"turn": item.metadata.get("text", item.content), "keys": keys[tid]})
    finally:
        await memory.close()
    for ex in examples:
        print(f"TURN {ex['turn'][:160]!r}\n  KEYS {ex['keys']!r}")
    out = {
        "llm": args.llm,
        "conversations": [c.id for c in convs],
        "turns": total.calls,
        "time_s": round(total.time_s, 2),
        "turns_per_s": round(total.items_per_s, 3),
        "enriched": total.enriched,
        "empty": total.empty,
        "malformed": total.malformed,
        "failed": total.failed,
        "cache_hits": getattr(llm, "hits", None),
        "concurrency": args.concurrency,
        "max_tokens": args.max_tokens,
        "wall_time_s": round(time.perf_counter() - t0, 2),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--llm", default="local", help="local, local:MODEL, openai:MODEL")
    p.add_argument("--base-url", help="OpenAI-compatible server URL (openai:MODEL)")
    p.add_argument("--conv-id", nargs="+", default=["conv-26"], help="LoCoMo conversations")
    p.add_argument("--limit", type=int, default=None, help="at most this many turns per conversation")
    p.add_argument("--concurrency", type=int, default=16, help="requests in flight (local: batch size)")
    p.add_argument("--max-tokens", type=int, default=40)
    p.add_argument("--threads", type=int, default=None, help="torch threads of the local model")
    p.add_argument("--cache", help="LLM reply cache file (fresh file: cold timing)")
    p.add_argument("--examples", type=int, default=5, help="turns shown with their keys, per conversation")
    print(json.dumps(asyncio.run(main(p.parse_args()))))
