"""Measure the local back-end's decoding: greedy tokens/s at batch 1 and batch 8, and constrained vs free.

Run (numbers depend on the CPU and on whatever else runs on it; the load average is printed)::

    HF_HUB_OFFLINE=1 .venv/bin/python -m bench.decode [--model PATH] [--tokens 64] [--repeats 2]

:class:`memrl.llm.local.LocalLLM` (the offline SmolLM2 by default) on eight fixed prompts: the best of
``--repeats`` wall times of greedy decoding, then the same free and under a JSON schema (the grammar
MemBuilder's actions use), with the first schema's compile time. Last line of stdout: one JSON object
(``tok_per_s`` per batch, ``ms_per_step`` free and json-schema per batch, ``grammar_compile_s``, the load
averages).
"""

from __future__ import annotations

import argparse
import json
import os
import time

from memrl.llm.base import SamplingParams
from memrl.llm.local import LocalLLM

PROMPTS = [
    "Write a long story about a cat who learns to fly.",
    "Explain in detail how a bicycle works.",
    "Describe a day in the life of a lighthouse keeper.",
    "Write a letter to a friend about your summer holiday.",
    "List and describe ten famous paintings.",
    "Tell me everything you know about the Moon.",
    "Write a long poem about the sea.",
    "Describe how bread is made, step by step.",
]
SCHEMA = {
    "type": "object",
    "properties": {"operation": {"enum": ["ADD", "UPDATE", "SKIP"]}, "memory": {"type": "string"}},
    "required": ["operation", "memory"],
}


def _run(llm: LocalLLM, prompts: list[str], tokens: int, repeats: int, **kw: object) -> tuple[float, int]:
    """Best-of-``repeats`` wall time and the completion tokens produced."""
    convs = [[{"role": "user", "content": p}] for p in prompts]
    best, produced = float("inf"), 0
    for _ in range(repeats):
        start = time.perf_counter()
        out = llm.generate_sync(convs, sampling=SamplingParams(max_tokens=tokens), **kw)  # type: ignore[arg-type]
        elapsed = time.perf_counter() - start
        if elapsed < best:
            best, produced = elapsed, sum(len(r.completion_ids) for r in out)
    return best, produced


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="folder, .gguf or hub id (default: offline SmolLM2)")
    ap.add_argument("--tokens", type=int, default=64, help="new tokens per sequence")
    ap.add_argument("--repeats", type=int, default=2, help="report the best of this many runs")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = ap.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    start = time.perf_counter()
    llm = LocalLLM(args.model).load()
    load_before = os.getloadavg()
    print(f"model {llm.path} loaded in {time.perf_counter() - start:.1f}s; load average {load_before}")
    result: dict = {"model": str(llm.path), "tokens": args.tokens, "repeats": args.repeats,
                    "threads": args.threads, "tok_per_s": {}, "ms_per_step": {}}  # fmt: skip
    _run(llm, PROMPTS[:1], 4, 1)  # warm-up
    for batch in (1, 8):
        secs, n = _run(llm, PROMPTS[:batch], args.tokens, args.repeats)
        print(f"greedy batch {batch}: {n} tokens in {secs:.2f}s = {n / secs:.1f} tok/s")
        result["tok_per_s"][f"batch{batch}"] = round(n / secs, 1)
    start = time.perf_counter()
    llm.grammars.for_schema(SCHEMA)
    result["grammar_compile_s"] = round(time.perf_counter() - start, 2)
    print(f"grammar compile (first schema): {result['grammar_compile_s']:.2f}s")
    for batch in (1, 8):
        free_s, free_n = _run(llm, PROMPTS[:batch], args.tokens, args.repeats)
        json_s, json_n = _run(llm, PROMPTS[:batch], args.tokens, args.repeats, json_schema=SCHEMA)
        free_ms, json_ms = 1000 * free_s / free_n * batch, 1000 * json_s / json_n * batch
        print(
            f"batch {batch}: free {free_n} tok in {free_s:.2f}s ({free_ms:.0f} ms/step), "
            f"json-schema {json_n} tok in {json_s:.2f}s ({json_ms:.0f} ms/step)"
        )
        result["ms_per_step"][f"batch{batch}"] = {"free": round(free_ms, 1), "json_schema": round(json_ms, 1)}
    print(f"load average after: {os.getloadavg()}")
    result["load_average"] = {"before": load_before, "after": os.getloadavg()}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
