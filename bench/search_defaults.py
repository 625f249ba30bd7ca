"""Search defaults across data sets: hybrid fusion settings scored on LoCoMo and LongMemEval at once.

    HF_HUB_OFFLINE=1 python -m bench.search_defaults                       # the grid in docs/results/retrieval.md
    python -m bench.search_defaults --embedder hashing --locomo-conv conv-41 # a smoke run
    python -m bench.search_defaults --only "defaults (" --vary time_boost=0.1,0.2 --vary candidates=100
                                             # today's defaults beside one field changed at a time
    python -m bench.search_defaults --lodo --tables runs/fusion-tables.json [--extra NAME=DATASET:PATH]
                                             # leave one data set out: fixed, fitted and adaptive fusion

Builds each data set's conversations once with the ``raw`` builder (one store, embeddings cached), then, for
every setting of the grid (:func:`grid`: fusion weights, fusion kind, the LoCoMo-tuned priors switched on
or off), searches every question and reports turn recall@10 of hybrid search against the best single mode
(dense or BM25) of the same data set. The default must not lose to its own halves anywhere, so a setting
is ranked by its *worst* margin over the data sets (``min_margin``), then by the mean recall. Tune on the
training items only: LoCoMo's 7 training conversations (``--locomo-split train``) and LongMemEval part A
(the only real LongMemEval items here); LoCoMo's test conversations are for the final check
(``--locomo-split all``). Prints a markdown table, then one JSON line: ``settings`` (name -> per-data-set
recall@10 and margin), ``best`` (the setting with the largest min margin), ``baselines`` (dense and BM25
per data set), ``n_questions`` per data set, ``wall_time_s``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from memrl.data import load_conversations
from memrl.data.splits import SPLITS
from memrl.eval.retrieval import aevaluate, open_memory
from memrl.eval.retrieval.config import CORE_CATEGORIES, RetrievalConfig

LONGMEMEVAL_PART_A = "longmemeval/longmemeval_oracle_part_a.json"


def grid(base: RetrievalConfig) -> list[tuple[str, RetrievalConfig]]:
    """The settings compared: today's defaults, then fusion weights and kinds, then the priors off."""
    rep = dataclasses.replace
    out = [
        (f"defaults (convex {base.dense_weight:.1f}/{base.bm25_weight:.1f})", base),
        (
            "before issue 39: spreading from 20 seeds on any store, no aggregate diversity, date fit 0.1",
            rep(base, spread_seeds=20, spread_seed_share=1.0, aggregate_diversity=0.0, date_fit=0.1),
        ),
        ("before the joint tuning: 20 seeds, date fit 0.1", rep(base, spread_seeds=20, date_fit=0.1)),
        (
            f"defaults, spreading from {base.spread_seeds} seeds on any store",
            rep(base, spread_seed_share=1.0),
        ),
        ("defaults, no aggregate diversity", rep(base, aggregate_diversity=0.0)),
    ]
    for d in (0.05, 0.15, 0.2):
        out.append((f"defaults, aggregate diversity {d:g}", rep(base, aggregate_diversity=d)))
    for w in (w for w in (0.3, 0.4, 0.5, 0.6, 0.7) if w != base.dense_weight):
        out.append((f"convex {w:.1f}/{1 - w:.1f}", rep(base, dense_weight=w, bm25_weight=round(1 - w, 2))))
    out.append(("rrf k=60 1/1", rep(base, fusion="rrf", dense_weight=1.0, bm25_weight=1.0)))
    out.append(("rrf k=60 0.5/1", rep(base, fusion="rrf", dense_weight=0.5, bm25_weight=1.0)))
    off = {
        "no speaker prior": {"speaker_boost": 0.0, "strip_speaker": False},
        "no time prior": {"time_boost": 0.0},
        "no session stage": {"session_stage": 0.0},
        "no spreading": {"spread": 0.0},
        "no date fit": {"date_fit": 0.0},
        "no window view": {"window": 0.0},
    }
    for name, change in off.items():
        out.append((f"defaults, {name}", rep(base, **change)))
    return out


def _field_value(field: str, raw: str, text: str) -> Any:
    fields = {f.name for f in dataclasses.fields(RetrievalConfig)}
    if field not in fields or not raw:
        raise argparse.ArgumentTypeError(f"--vary {text!r}: expected FIELD=V1,V2 with FIELD a search option")
    default = getattr(RetrievalConfig(), field)
    kind = type(default) if default is not None else float
    try:
        return (raw.lower() in ("1", "true", "yes")) if kind is bool else kind(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--vary {field}: {raw!r} is not a {kind.__name__}") from None


def parse_vary(text: str) -> list[tuple[str, dict[str, Any]]]:
    """``FIELD=V1,V2``: one setting per value, today's defaults with that one field of RetrievalConfig
    changed; ``F1=V+F2=W``: one setting with both changed. Values are parsed by the field's type; a wrong
    field or value is an error naming it."""
    if "+" in text:
        change = {}
        for part in text.split("+"):
            field, _, raw = part.partition("=")
            change[field.strip()] = _field_value(field.strip(), raw.strip(), text)
        return [("defaults, " + " + ".join(f"{f} {v}" for f, v in change.items()), change)]
    field, _, values = text.partition("=")
    field = field.strip()
    raws = [v.strip() for v in values.split(",") if v.strip()] or [""]
    return [(f"defaults, {field} {raw}", {field: _field_value(field, raw, text)}) for raw in raws]


def recall10(rows: list[dict[str, Any]], mode: str) -> float:
    """Turn recall@10 pooled over the questions with evidence (LoCoMo: categories 1-4)."""
    vals = [
        r["recall"][mode]["10"]
        for r in rows
        if r["recall"].get(mode, {}).get("10") is not None
        and (r["category_id"] is None or r["category_id"] in CORE_CATEGORIES)
    ]
    return sum(vals) / len(vals) if vals else float("nan")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    data_dir = Path(args.data_dir)
    base = RetrievalConfig(embedder=args.embedder, embed_cache=args.embed_cache, k=(10,),
                           modes=("dense", "bm25", "hybrid"))  # fmt: skip
    locomo, _ = load_conversations("locomo", data_dir / "locomo")
    if args.locomo_conv:
        locomo = [c for c in locomo if c.id in set(args.locomo_conv)]
    elif args.locomo_split != "all":
        keep = set(SPLITS["locomo"][args.locomo_split])
        locomo = [c for c in locomo if c.id in keep]
    lme, _ = load_conversations("longmemeval", data_dir / LONGMEMEVAL_PART_A)
    datasets = {"locomo": locomo, "longmemeval": lme}
    t0 = time.perf_counter()
    memory = open_memory(base)
    results: dict[str, dict[str, Any]] = {}
    baselines: dict[str, dict[str, float]] = {}
    n_questions: dict[str, int] = {}
    settings = [(n, c) for n, c in grid(base) if not args.only or any(o in n for o in args.only)] + [
        (name, dataclasses.replace(base, **change)) for vary in args.vary for name, change in vary
    ]
    try:
        for name, cfg in settings:
            res: dict[str, Any] = {}
            for ds, convs in datasets.items():
                report = await aevaluate(convs, dataclasses.replace(cfg, dataset=ds), memory=memory,
                                         progress=False)  # fmt: skip
                rows = report["rows"]
                n_questions[ds] = len(rows)
                dense, bm25, hybrid = (recall10(rows, m) for m in ("dense", "bm25", "hybrid"))
                best_single = max(dense, bm25)
                res[ds] = {"hybrid": round(hybrid, 4), "dense": round(dense, 4), "bm25": round(bm25, 4),
                           "margin": round(hybrid - best_single, 4)}  # fmt: skip
                baselines.setdefault(ds, {"dense": round(dense, 4), "bm25": round(bm25, 4)})
            res["min_margin"] = min(res[ds]["margin"] for ds in datasets)
            res["mean_hybrid"] = round(sum(res[ds]["hybrid"] for ds in datasets) / len(datasets), 4)
            results[name] = res
            print(json.dumps({"setting": name, **res}), file=sys.stderr, flush=True)
    finally:
        await memory.close()
    best = max(results, key=lambda n: (results[n]["min_margin"], results[n]["mean_hybrid"]))
    return {"settings": results, "best": best, "baselines": baselines, "n_questions": n_questions,
            "locomo_conversations": [c.id for c in locomo], "embedder": args.embedder,
            "wall_time_s": round(time.perf_counter() - t0, 1)}  # fmt: skip


def _extra(text: str) -> tuple[str, str, str]:
    name, _, rest = text.partition("=")
    dataset, _, path = rest.partition(":")
    if not (name and dataset and path):
        raise argparse.ArgumentTypeError(f"--extra {text!r}: expected NAME=DATASET:PATH")
    return name, dataset, path


async def run_lodo(args: argparse.Namespace) -> dict[str, Any]:
    """The leave-one-dataset-out protocol (module docstring); tables read from ``--tables`` if there."""
    from bench.fusion_fit import collect, pooled, protocol

    cached = Path(args.tables) if args.tables else None
    tables: dict[str, Any] = json.loads(cached.read_text()) if cached and cached.is_file() else {}
    data_dir = Path(args.data_dir)
    base = RetrievalConfig(embedder=args.embedder, embed_cache=args.embed_cache, k=(10,),
                           modes=("dense", "bm25", "hybrid"))  # fmt: skip
    wanted = {"locomo": ("locomo", str(data_dir / "locomo")),
              "longmemeval": ("longmemeval", str(data_dir / LONGMEMEVAL_PART_A))}  # fmt: skip
    wanted.update({name: (ds, path) for name, ds, path in args.extra})
    t0 = time.perf_counter()
    memory = None
    try:
        for name, (ds, path) in wanted.items():
            if name in tables:
                continue
            convs, _ = load_conversations(ds, path)
            if name == "locomo":
                keep = set(args.locomo_conv or SPLITS["locomo"]["train"])
                convs = [c for c in convs if c.id in keep]
            memory = memory or open_memory(base)
            tables[name] = await collect(convs, base, ds, memory)
            print(json.dumps({"collected": name, "n": len(tables[name]["ids"])}), file=sys.stderr, flush=True)
    finally:
        if memory is not None:
            await memory.close()
    if cached:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(tables))
    out = protocol({n: tables[n] for n in wanted})
    out["models"]["pooled"] = pooled({n: tables[n] for n in wanted})
    out.update(datasets={n: {"dataset": ds, "path": p, "n_questions": len(tables[n]["ids"])}
                         for n, (ds, p) in wanted.items()}, embedder=args.embedder,
               wall_time_s=round(time.perf_counter() - t0, 1))  # fmt: skip
    return out


def lodo_markdown(out: dict[str, Any]) -> str:
    names = list(out["datasets"])
    head = " | ".join(f"{n} hybrid | margin (95% CI)" for n in names)
    lines = [f"| setting | {head} | worst held-out margin |", "|---|" + "---|---|" * len(names) + "---|"]
    for name, r in out["settings"].items():
        cells = []
        for n in names:
            v = r.get(n)
            cells.append("(fitted here) | " if v is None else
                         f"{v['hybrid']:.3f} | {v['margin']:+.3f} ({v['ci'][0]:+.3f}..{v['ci'][1]:+.3f})")  # fmt: skip
        mark = " **chosen**" if name == out["best"] else ""
        worst = r.get("method_worst", r["worst_margin"])
        lines.append(f"| {name}{mark} | " + " | ".join(cells) + f" | {worst:+.3f} |")
    base = ", ".join(f"{n}: dense {out['settings'][next(iter(out['settings']))][n]['dense']:.3f} / BM25 "
                     f"{out['settings'][next(iter(out['settings']))][n]['bm25']:.3f}" for n in names)  # fmt: skip
    return "\n".join(lines) + f"\n\nSingle modes: {base}."


def markdown(out: dict[str, Any]) -> str:
    lines = ["| setting | LoCoMo hybrid | (dense / BM25) | margin | LongMemEval hybrid | (dense / BM25) | margin |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, r in out["settings"].items():
        lo, lm = r["locomo"], r["longmemeval"]
        mark = " **best**" if name == out["best"] else ""
        lines.append(
            f"| {name}{mark} | {lo['hybrid']:.3f} | {lo['dense']:.3f} / {lo['bm25']:.3f} | {lo['margin']:+.3f} "
            f"| {lm['hybrid']:.3f} | {lm['dense']:.3f} / {lm['bm25']:.3f} | {lm['margin']:+.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default="../shared/data", help="folder with locomo/ and longmemeval/")
    p.add_argument("--embedder", default="minilm")
    p.add_argument("--embed-cache", default=None, help="embedding cache file (re-runs embed nothing)")
    p.add_argument("--locomo-split", default="train", choices=("train", "test", "all"))
    p.add_argument("--locomo-conv", nargs="*", help="LoCoMo conversation ids instead of a split")
    p.add_argument("--only", nargs="*", help="run only the grid's settings whose name contains one of these")
    p.add_argument("--vary", type=parse_vary, action="append", default=[], metavar="FIELD=V1,V2",
                   help="also run today's defaults with this one search option changed, per value, or with "
                   "F1=V+F2=W changed together (repeatable; run whatever --only says)")  # fmt: skip
    p.add_argument(
        "--lodo", action="store_true", help="the leave-one-dataset-out protocol (bench.fusion_fit)"
    )
    p.add_argument("--extra", type=_extra, action="append", default=[], metavar="NAME=DATASET:PATH",
                   help="--lodo: one more data set (all its items are training items), e.g. "
                   "lme-b=longmemeval:../shared/data/longmemeval/other.json")  # fmt: skip
    p.add_argument("--tables", default=None, help="--lodo: JSON file keeping the per-question tables")
    args = p.parse_args(argv)
    if args.lodo:
        out = asyncio.run(run_lodo(args))
        print(lodo_markdown(out))
        print(json.dumps(out))
        return 0
    out = asyncio.run(run(args))
    print(markdown(out))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
