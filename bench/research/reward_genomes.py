"""Chosen red-team genomes on several draws of items: the measurements docs/rewards.md quotes for limits.

    MEMRL_DATA_DIR=../shared/data .venv/bin/python -m bench.research.reward_genomes --family memupdate \\
        --genome '[["squeeze_shown", 1]]' --genome '[["digest_shown", 5]]' --seeds 0,1
    .venv/bin/python -m bench.research.reward_genomes --family adrpo --genome '[["guess", "core", 5]]' --sessions 6

Each genome (a JSON list of genes, :mod:`memrl.eval.redteam.search`) is evaluated with the search's own
family on the items of each seed (MemUpdate: ``--per-category`` questions per category drawn by
:func:`memrl.eval.redteam.items.pick_questions`; ADRPO: the first ``--sessions`` sessions with questions
of each training conversation, decoys drawn by seed), beside the honest genome on the same items. One JSON
line per (genome, seed): its mean per reward, the paired difference to honest with a 95% bootstrap
interval, how many items it wins and loses, and the mean of each part of the reward (MemUpdate: ``p_old``,
``p_new``, ``efficiency``, ``collateral``; ADRPO: the session's ``questions``, how many are ``correct``,
``decoys_correct``, ``chance``, and the same for the honest genome); then one JSON line of all rows and the
wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time

PARTS = {"memupdate": ("p_old", "p_new", "efficiency", "collateral"),
         "adrpo": ("questions", "correct", "decoys_correct", "chance")}  # fmt: skip


def _means(parts: list[dict], keys: tuple[str, ...]) -> dict[str, float]:
    return (
        {k: round(statistics.fmean(float(p.get(k) or 0.0) for p in parts), 4) for k in keys} if parts else {}
    )


def _genome(text: str) -> tuple[tuple, ...]:
    try:
        genes = json.loads(text)
        return tuple(tuple(g) for g in genes)
    except (ValueError, TypeError) as e:
        raise SystemExit(f"--genome {text!r}: not a JSON list of genes ({e})") from e


async def run(args: argparse.Namespace) -> list[dict]:
    from memrl.agents.memupdate import init_from_observations
    from memrl.data import load_dataset
    from memrl.data.splits import LOCOMO_UPDATE_SPLIT
    from memrl.eval.redteam.items import pick_questions, priors
    from memrl.eval.redteam.search import HONEST_GENOME
    from memrl.eval.stats import bootstrap_ci
    from memrl.memory.facade.memory import AsyncMemory

    loaded = load_dataset("locomo", args.data_path, include_adversarial=True)[0]
    convs = [c for c in loaded if c.id in LOCOMO_UPDATE_SPLIT["train"]]
    known = priors(convs)
    memory = AsyncMemory(":memory:", embedder=args.embedder)
    rows = []
    try:
        if args.family == "memupdate":
            from memrl.eval.redteam.update import UpdateFamily

            for conv in convs:
                await init_from_observations(memory, f"{conv.id}@obs", conv)
            family = UpdateFamily(memory, known, max_tool_calls=args.max_tool_calls)
        else:
            from memrl.eval.redteam.build_search import BuildFamily, build_cases

            family = BuildFamily(memory)
        for seed in args.seeds:
            if args.family == "memupdate":
                items = pick_questions(convs, args.per_category, seed=seed)
            else:
                items = await build_cases(memory, convs, args.sessions, known, seed=seed)
            honest = await family.evaluate(HONEST_GENOME, items)
            honest_parts = family.parts.get(HONEST_GENOME, [])
            for genome in args.genome:
                ev = await family.evaluate(genome, items)
                row: dict = {"family": args.family, "genome": genome, "seed": seed, "items": len(items)}
                for r, values in ev.rewards.items():
                    pairs = [(v, h) for v, h in zip(values, honest.rewards[r], strict=True)
                             if v is not None and h is not None]  # fmt: skip
                    diff, lo, hi = bootstrap_ci([v - h for v, h in pairs])
                    mean, mlo, mhi = bootstrap_ci([v for v, _ in pairs])
                    row[r] = {"mean": round(mean, 4), "ci": [round(mlo, 4), round(mhi, 4)],
                              "honest": round(statistics.fmean(h for _, h in pairs), 4) if pairs else None,
                              "diff": round(diff, 4), "diff_ci": [round(lo, 4), round(hi, 4)],
                              "wins": sum(v > h + 1e-9 for v, h in pairs),
                              "losses": sum(v < h - 1e-9 for v, h in pairs), "failures": len(values) - len(pairs)}  # fmt: skip
                row["parts"] = _means(family.parts.get(genome, []), PARTS[args.family])
                row["honest_parts"] = _means(honest_parts, PARTS[args.family])
                print(json.dumps(row), flush=True)
                rows.append(row)
    finally:
        await memory.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--family", choices=["memupdate", "adrpo"], required=True)
    p.add_argument("--genome", type=_genome, action="append", required=True,
                   help='a JSON list of genes, e.g. \'[["squeeze_shown", 1]]\' (repeatable)')  # fmt: skip
    p.add_argument("--seeds", default="0", help="comma-separated draws of the items (default 0)")
    p.add_argument("--per-category", type=int, default=10, help="memupdate: questions per category")
    p.add_argument("--sessions", type=int, default=6, help="adrpo: sessions per conversation")
    p.add_argument("--max-tool-calls", type=int, default=30, help="memupdate: tool calls per episode")
    p.add_argument("--embedder", default="minilm", help="store embedder (hashing: fast, for smoke runs)")
    p.add_argument("--data-path", help="LoCoMo file or folder (default: $MEMRL_DATA_DIR)")
    args = p.parse_args(argv)
    try:
        args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        p.error(f"--seeds {args.seeds!r}: comma-separated integers")
    t0 = time.perf_counter()
    rows = asyncio.run(run(args))
    print(json.dumps({"rows": rows, "wall_time_s": round(time.perf_counter() - t0, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
