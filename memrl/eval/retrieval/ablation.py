"""The retrieval ablation study: what each retrieval idea buys, one step at a time, on LoCoMo.

    memrl eval retrieval --dataset locomo --ablation

From the plain baseline (one item per turn, BM25 + dense, RRF), each row adds one idea on top of the row
before until the defaults; then ideas tried and not kept (each on top of the defaults), and leave-one-out
rows. Every row reports recall@10 (categories 1-4 pooled and per category) for dense, BM25 and hybrid
search, and on conversations 0-4 (where the knobs were tuned) and 5-9 (held out) apart. With ``--enrich LLM``
one last row adds write-time enrichment (LLM-written retrieval keys) to the defaults; no other row uses it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from memrl.data.types import Conversation
from memrl.eval.retrieval.config import CORE_CATEGORIES, RetrievalConfig
from memrl.eval.retrieval.report import halves
from memrl.eval.retrieval.run import aevaluate, open_memory
from memrl.eval.stats import to_markdown
from memrl.memory.analysis import spacy_model_installed
from memrl.scoring.metrics import LOCOMO_CATEGORIES


def ablation_steps(final: RetrievalConfig) -> list[tuple[str, RetrievalConfig]]:
    """The ablation study: from the plain baseline, add one idea at a time until ``final`` (the defaults),
    then the ideas tried and not kept (each on top of ``final``), and leave-one-out rows for the text.

    The baseline is one item per turn (``[date] Speaker: text [shares caption]``), BM25 over it with
    stemming, the dense model over the same text, RRF (k=60, equal weights, 50 candidates per list).
    """
    rep = dataclasses.replace
    enriched = final
    final = rep(final, enrich=None)  # every row without the LLM; enrichment is one row of its own
    plain = {
        "candidates": 50, "rrf_k": 60, "dense_weight": 1.0, "bm25_weight": 1.0, "fusion": "rrf",
        "speaker_boost": 0.0, "strip_speaker": False, "date_boost": 0.0, "time_boost": 0.0,
        "diversity": 0.0, "session_boost": 0.0, "question_words": False, "session_stage": 0.0, "spread": 0.0,
        "date_fit": 0.0, "window": 0.0, "rerank": None,
    }  # fmt: skip
    turn_only = rep(final.raw, context_before=0, context_after=0, views=("turn",), dense_views=("turn",))
    with_context = rep(final.raw, views=("turn", "context"), dense_views=("turn",))
    steps = [
        ("baseline: turn + date + speaker + caption, RRF", rep(final, raw=turn_only, **plain)),
        (
            "+ neighbour context (2 before, 2 after) as a BM25-only view",
            rep(final, raw=with_context, **plain),
        ),
    ]
    cumulative = [
        ("+ speaker prior (question names a speaker)", {"speaker_boost": final.speaker_boost}),
        ("+ speaker name dropped from the BM25 query", {"strip_speaker": final.strip_speaker}),
        ("+ time prior (when-questions favour turns with a time expression)", {"time_boost": final.time_boost}),
        ("+ date prior (question names a month/year)", {"date_boost": final.date_boost}),
        ("+ dense: pooled context vector (turn + 0.3 x neighbours)", {"raw": final.raw}),
        (f"+ convex fusion {final.dense_weight}/{final.bm25_weight}, {final.candidates} candidates",
         {"fusion": final.fusion, "dense_weight": final.dense_weight, "bm25_weight": final.bm25_weight,
          "candidates": final.candidates, "rrf_k": final.rrf_k}),
        ("+ question words (kind, likely, would...) dropped from the BM25 query",
         {"question_words": final.question_words}),
        (f"+ two-stage: session BM25 prior {final.session_stage}, best {final.session_top} sessions",
         {"session_stage": final.session_stage, "session_top": final.session_top}),
        (f"+ entity graph: spreading activation {final.spread} from {final.spread_seeds} hits",
         {"spread": final.spread, "spread_seeds": final.spread_seeds}),
        (f"+ time-aware: date-fit prior {final.date_fit} (question's dates vs the turn's date spans)",
         {"date_fit": final.date_fit}),
        (f"+ window view: best cosine of the turn and its neighbours, {final.window}", {"window": final.window}),
    ]  # fmt: skip
    # the shipped reranker fitted over this embedder's features
    shipped = "locomo-mpnet" if final.embedder == "mpnet" else "locomo"
    reranker = f"learned reranker {final.rerank or shipped} over {final.rerank_depth} candidates (fitted on conv 0-4)"
    if final.rerank:
        cumulative.append((f"+ {reranker}", {"rerank": final.rerank, "rerank_depth": final.rerank_depth}))
    cumulative[-1] = (cumulative[-1][0] + " = defaults", cumulative[-1][1])
    cfg = steps[-1][1]
    for name, change in cumulative:
        cfg = rep(cfg, **change)
        steps.append((name, cfg))
    if not final.rerank:
        steps.append((f"defaults + {reranker} (not kept)", rep(final, rerank=shipped)))
    steps += [
        ("defaults + session prior 0.3 (not kept)", rep(final, session_boost=0.3)),
        ("defaults + session diversity 0.05 (not kept)", rep(final, diversity=0.05)),
        ("defaults + BM25 pseudo-relevance feedback 5 docs/8 terms (not kept)", rep(final, prf_docs=5)),
        ("defaults + RRF k=10, weights 0.5/1 (not kept)",
         rep(final, fusion="rrf", rrf_k=10, dense_weight=0.5, bm25_weight=1.0)),
        ("defaults with session prior 0.2 (not kept: multi-hop and open-domain lose)", rep(final, session_stage=0.2)),
        ("defaults + inference questions weighted 0.6/0.4 dense/BM25 (not kept)",
         rep(final, abstract_dense_weight=0.6)),
        ("defaults with date-fit prior 0.4 (not kept)", rep(final, date_fit=0.4)),
        ("defaults with window view 0.4 (not kept)", rep(final, window=0.4)),
        ("defaults - image captions (leave one out)", rep(final, raw=rep(final.raw, include_caption=False))),
        ("defaults - session date in the text (leave one out)", rep(final, raw=rep(final.raw, date_style="none"))),
    ]  # fmt: skip
    if spacy_model_installed():  # optional (pip install memrl[ner]): the row is left out without it
        steps.append(
            (
                "defaults, entity graph with the spaCy tagger (not kept: no gain, +70 s)",
                rep(final, tagger="spacy"),
            )
        )
    if enriched.enrich:
        steps.append(
            (
                f"defaults + write-time enrichment: {enriched.enrich} keys per turn, weight "
                f"{enriched.enrich_weight} (LLM at build time)",
                enriched,
            )
        )
    return steps


def _r10(rows: list[dict[str, Any]], mode: str) -> dict[str, float]:
    """recall@10 per category name and pooled over categories 1-4."""
    out: dict[str, list[float]] = {}
    for r in rows:
        v = r["recall"].get(mode, {}).get("10")
        if v is None:
            continue
        out.setdefault(r["category"], []).append(v)
        if r["category_id"] in CORE_CATEGORIES:
            out.setdefault("overall", []).append(v)
    return {k: sum(v) / len(v) for k, v in out.items()}


async def arun_ablation(
    conversations: Sequence[Conversation], config: RetrievalConfig, *, progress: bool = True
) -> list[dict[str, Any]]:
    """Run :func:`ablation_steps` on one store (embeddings computed once, shared by the steps)."""
    memory = open_memory(config)
    rows_out = []
    try:
        for name, cfg in ablation_steps(dataclasses.replace(config, k=tuple(sorted({*config.k, 10})))):
            report = await aevaluate(conversations, cfg, memory=memory, progress=progress)
            row: dict[str, Any] = {"step": name, "wall_time_s": report["wall_time_s"]}
            for mode in cfg.modes:
                row[mode] = _r10(report["rows"], mode)
                # knobs were tuned on the first five LoCoMo conversations: the rest are reported apart too
                split = halves(report["rows"], mode)
                if split:
                    row[f"{mode}_tuning"], row[f"{mode}_heldout"] = split.values()
            rows_out.append(row)
            if progress:
                print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        await memory.close()
    return rows_out


def run_ablation(
    conversations: Sequence[Conversation], config: RetrievalConfig, *, progress: bool = True
) -> list[dict[str, Any]]:
    """Synchronous :func:`arun_ablation`: one row per step with recall@10 per mode and category."""
    return asyncio.run(arun_ablation(conversations, config, progress=progress))


def ablation_markdown(rows: list[dict[str, Any]]) -> str:
    """The ablation table: recall@10 per step, pooled (and held-out) per mode, per category for hybrid."""
    cats = [LOCOMO_CATEGORIES[c] for c in CORE_CATEGORIES]
    table = []
    base = rows[0].get("hybrid", {}).get("overall") if rows else None
    for r in rows:
        t: dict[str, Any] = {"step": r["step"]}
        for mode in ("dense", "bm25", "hybrid"):
            if mode in r:
                t[mode] = r[mode].get("overall", math.nan)
        if base is not None and "hybrid" in r:
            t["hybrid Δ"] = f"{r['hybrid']['overall'] - base:+.3f}"
        if "hybrid_tuning" in r:
            t["hybrid conv 0-4"] = r["hybrid_tuning"]
        if "hybrid_heldout" in r:
            t["hybrid conv 5-9"] = r["hybrid_heldout"]
        for c in cats:
            t[f"hybrid {c}"] = r.get("hybrid", {}).get(c, math.nan)
        table.append(t)
    return "## Ablation: recall@10, categories 1-4 pooled (turn level)\n\n" + to_markdown(table) + "\n"
