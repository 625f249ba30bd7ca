"""Benchmark of the LoCoMo retrieval evaluation (no LLM): wall time, where it goes, and recall@10.

It runs :func:`memrl.eval.retrieval.aevaluate` with the default config over all 10 LoCoMo conversations,
on a fresh in-memory store, so every one of the 5,882 turns is embedded (all-MiniLM-L6-v2 on CPU) and
then 1,540 questions are searched in three modes (dense, bm25, hybrid). Target: under 2 minutes on the
2-core machine, embedding included. Phases reported apart: model load, embedding (turns and questions),
storing, search. ``--warm`` runs the evaluation a second time on the same store (embeddings cached by
content hash, as when ``--db-path`` points at an existing file), which is the cost of everything but
the embedding.

Run::

    HF_HUB_OFFLINE=1 MEMRL_DATA_DIR=/work/shared/data .venv/bin/python -m bench.retrieval
    .venv/bin/python -m bench.retrieval --warm --profile      # + a second, cached pass; cProfile of it
    .venv/bin/python -m bench.retrieval --conv-id conv-26 --batch-size 128
    .venv/bin/python -m bench.retrieval --embed-cache /tmp/emb.db   # twice: the second run is the warm one

Timings are noisy when other jobs share the two cores: the load average is printed with the results.
The last line of stdout is one JSON object (``wall_time_s``, ``embed_time_s``, ``recall_at_10``,
``n_turns``, ``turns_per_s_embedding``, ...).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import sys
import time

from memrl.eval.retrieval import aevaluate, load_conversations
from memrl.eval.retrieval.config import RetrievalConfig
from memrl.memory.embedders.providers import CachedEmbedder, create_embedder
from memrl.memory.facade.memory import AsyncMemory


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--conv-id", nargs="*", default=[], help="only these conversations (default: all 10)")
    p.add_argument("--embedder", default="minilm", help="minilm (default), hashing, st:NAME")
    p.add_argument("--batch-size", type=int, default=None, help="embedding batch size (default: embedder's)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--db-path", default=":memory:", help="store file; an existing one has cached embeddings")
    p.add_argument("--warm", action="store_true", help="then run again on the same store (cached)")
    p.add_argument(
        "--embed-cache",
        default=None,
        help="embedding cache file shared across runs, as `memrl eval retrieval` uses by default (default: "
        "none, so every text is embedded: the cold cost)",
    )
    p.add_argument("--profile", action="store_true", help="cProfile the last pass (top 25 by cumulative)")
    return p.parse_args(argv)


async def run(args: argparse.Namespace) -> dict:
    config = RetrievalConfig(conv_id=tuple(args.conv_id), embedder=args.embedder, bootstrap=200)
    convs = load_conversations(config)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    embedder = create_embedder(args.embedder)
    if args.batch_size and hasattr(embedder, "batch_size"):
        embedder.batch_size = args.batch_size
    if hasattr(embedder, "_load"):
        embedder._load()  # model load timed apart from embedding
    load_s = time.perf_counter() - t0
    if args.embed_cache:
        embedder = CachedEmbedder(embedder, args.embed_cache)
    memory = AsyncMemory(args.db_path, embedder=embedder)
    passes = []
    profile_text = None
    try:
        for i in range(2 if args.warm else 1):
            prof = cProfile.Profile() if args.profile and i == (1 if args.warm else 0) else None
            if prof:
                prof.enable()
            report = await aevaluate(convs, config, memory=memory, progress=sys.stderr.isatty())
            if prof:
                prof.disable()
                buf = io.StringIO()
                pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(25)
                profile_text = buf.getvalue()
            passes.append(report)
    finally:
        await memory.close()
    wall = time.perf_counter() - t0
    cold = passes[0]
    n_texts = cold["n_turns"]
    out = {
        "wall_time_s": round(wall, 2),
        "model_load_s": round(load_s, 2),
        "embed_time_s": cold["embed_time_s"],
        "build_time_s": cold["build_time_s"],
        "search_time_s": cold["search_time_s"],
        "n_turns": n_texts,
        "n_items": cold["n_items"],
        "n_questions": cold["n_questions"],
        "embed_turns_s": cold["embed_turns_s"],
        "embed_questions_s": cold["embed_questions_s"],
        "turns_per_s_embedding": round(n_texts / cold["embed_turns_s"], 1) if cold["embed_turns_s"] else None,
        "recall_at_10": cold["recall_at_10"],
        "recall_at_10_by_mode": {m: v["recall_at_k"]["10"] for m, v in cold["modes"].items()},
        "under_2_min": wall < 120,
        "embedder": cold["embedder"],
        "torch_threads": _threads(),
        "load_average": os.getloadavg(),
    }
    if args.warm:
        warm = passes[1]
        out["warm"] = {k: warm[k] for k in ("wall_time_s", "embed_time_s", "build_time_s", "search_time_s")}
    if profile_text:
        print(profile_text)
    return out


def _threads() -> int | None:
    try:
        import torch

        return torch.get_num_threads()
    except ImportError:  # pragma: no cover
        return None


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = parse_args(argv)
    out = asyncio.run(run(args))
    print(
        f"wall {out['wall_time_s']} s (model load {out['model_load_s']} s, embedding {out['embed_time_s']} s: "
        f"turns {out['embed_turns_s']} s = {out['turns_per_s_embedding']} turns/s, questions "
        f"{out['embed_questions_s']} s; building {out['build_time_s']} s incl. turn embedding, "
        f"search {out['search_time_s']} s); recall@10 hybrid {out['recall_at_10']:.3f}; "
        f"load average {out['load_average'][0]:.1f}"
    )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
