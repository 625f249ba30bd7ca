"""Retrieval evaluation, no LLM: does search over the ``raw`` memory find the turns a question rests on?

For each conversation the ``raw`` builder stores every turn (and the data set's own memories, PerLTQA's)
into its own namespace of one store, then every question is searched in each mode (dense, bm25, hybrid)
and scored against its gold evidence: recall@k at evidence level (share of evidence ids in the top k) and
at session level (share of evidence ids whose session appears in the top k), per category and pooled,
with bootstrap 95% intervals. One retrieved id is one turn (or one memory), so recall@10 means ten.
LongMemEval's figures come too (:mod:`memrl.scoring.ranking`): NDCG@k (binary relevance, its discount)
and all@k (``recall_all``: every evidence id found), at turn level and at session level (the first k
distinct sessions of the turn ranking, against the evidence sessions; the session recall above counts
the sessions of the first k turns instead).

Evidence per data set: LoCoMo's turns (categories 1-4 pooled; ``include_adversarial`` adds 5);
LongMemEval's ``has_answer`` turns (session level: its evidence sessions); PerLTQA's memory ids (a
dialogue id is found by any of its turns, an event / relationship / profile id by its memory item);
HotpotQA's gold documents (found by any of their sentences). With ``gold="corrected"`` (LoCoMo) the same
retrieved turns are also scored against locomo-audit's corrected evidence (``report["corrected"]``). A data set without evidence (MemAgent's
published eval files) is refused with a :class:`ConfigError`. Every figure carries the number of
questions behind it (``n``); a figure with no question behind it is ``None`` (``null`` in JSON). Run::

    memrl eval retrieval --dataset locomo --output-dir runs/retrieval      # time: bench/retrieval.py
    memrl eval retrieval --ablation                                         # what each idea bought

or from Python: ``evaluate_retrieval(load_conversations(cfg), cfg)`` with ``cfg = RetrievalConfig()``.

``output_dir`` receives ``questions.jsonl`` (one line per question: evidence, retrieved turn ids and
sessions per mode, recalls), ``summary.json``, ``report.md`` and ``recall.png``. The defaults (in :class:`~memrl.eval.retrieval.config.RetrievalConfig`,
:class:`RawConfig` and :class:`~memrl.memory.search.hybrid.SearchOptions`) are the best settings of the ablation study
(:func:`ablation_steps`): neighbour context as a BM25 view, pooled dense vectors, speaker/time/date priors,
convex fusion. Knobs were tuned on conversations 0-4; the ablation also reports conversations 5-9 apart.
All conversations are built before any question is searched (BM25 statistics are per namespace, so the
order no longer matters for scores; building first keeps build and search times apart). Before building, every text to embed (all turns,
then all questions) is embedded up front, longest first, in blocks (:func:`prefetch_embeddings`): one
pass with little padding instead of one call per conversation.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memrl.data.types import Conversation
from memrl.errors import ConfigError
from memrl.eval.retrieval.config import RetrievalConfig
from memrl.eval.retrieval.report import summarize, write_outputs
from memrl.eval.retrieval.search import (
    build_conversation,
    evaluate_conversation,
    namespace_of,
    prefetch_embeddings,
)
from memrl.memory import AsyncMemory


def open_memory(config: RetrievalConfig) -> AsyncMemory:
    """The store the evaluation builds into, its embedder wrapped in the cross-run cache (``embed_cache``)."""
    from memrl.memory.embedders import cache_embedder, create_embedder, default_cache_path

    embedder = create_embedder(config.embedder)
    if config.embed_cache != "none" and not config.embedder.startswith("hashing"):
        path = default_cache_path() if config.embed_cache == "auto" else config.embed_cache
        embedder = cache_embedder(embedder, path)
    return AsyncMemory(config.db_path or ":memory:", embedder=embedder)


def enrich_llm(config: RetrievalConfig) -> Any:
    """The enrichment LLM of ``config`` (``enrich``), wrapped in its reply cache (``enrich_cache``)."""
    from memrl.agents.enrich import llm_from_spec
    from memrl.loading import cache_root

    cache = None
    if config.enrich_cache != "none":
        cache = config.enrich_cache
        if cache == "auto":
            cache = str(cache_root() / "llm.db")
    kw: dict[str, Any] = {}
    if str(config.enrich).partition(":")[0] == "local":
        kw["max_batch_size"] = config.enrich_concurrency
    return llm_from_spec(str(config.enrich), base_url=config.enrich_base_url, cache=cache, **kw)


async def enrich_conversations(
    memory: AsyncMemory, conversations: Sequence[Conversation], config: RetrievalConfig, *, progress: bool
) -> dict[str, Any] | None:
    """With ``config.enrich``: the LLM writes retrieval keys for every built conversation's turns
    (:func:`memrl.agents.enrich.enrich`, resumable, cached); returns the pass's counts and time, or None."""
    if not config.enrich:
        return None
    from tqdm.auto import tqdm

    from memrl.agents.enrich import EnrichConfig, EnrichStats, enrich

    llm = enrich_llm(config)
    cfg = EnrichConfig(concurrency=config.enrich_concurrency, new_only=config.enrich_new_only)
    total = EnrichStats(namespace="*")
    n = sum(len(s.turns) for c in conversations for s in c.sessions)
    with tqdm(total=n, desc=f"enrich ({config.enrich})", unit="turn", disable=not progress) as bar:
        for conv in conversations:
            total.add(await enrich(memory, namespace_of(conv), llm, config=cfg, bar=bar))
    out = total.to_dict()
    out.pop("namespace")
    out.update(
        llm=config.enrich,
        weight=config.enrich_weight,
        cache_hits=getattr(llm, "hits", None),
        cache_misses=getattr(llm, "misses", None),
    )
    return out


def load_conversations(config: RetrievalConfig) -> list[Conversation]:
    """The conversations of ``config`` (adversarial questions loaded only when asked for).

    A :class:`ConfigError` says so when no selected question has evidence: recall cannot be measured."""
    from memrl.data import load_conversations as load

    convs, _ = load(config.dataset, config.data_path, lengths=config.lengths,
                    include_adversarial=config.include_adversarial)  # fmt: skip
    if config.conv_id:
        missing = set(config.conv_id) - {c.id for c in convs}
        if missing:
            raise ConfigError(f"unknown conversation ids: {', '.join(sorted(missing))}")
        convs = [c for c in convs if c.id in set(config.conv_id)]
    selected = [q for c in convs for q in c.questions if config.selects(q)]
    if not any(q.evidence or q.evidence_sessions for q in selected):
        raise ConfigError(
            f"{config.dataset}: none of its {len(selected)} selected questions has evidence (gold turns, memory "
            "ids or documents), so retrieval recall cannot be measured; `memrl eval --dataset "
            f"{config.dataset}` scores the answers instead"
        )
    return convs


async def aevaluate(
    conversations: Sequence[Conversation],
    config: RetrievalConfig,
    *,
    memory: AsyncMemory | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Evaluate (see the module docstring); ``memory`` reuses an open store and its embedding cache."""
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    own = memory is None
    if memory is None:
        memory = open_memory(config)
    n_q = sum(1 for c in conversations for q in c.questions if config.selects(q))
    rows: list[dict[str, Any]] = []
    totals = {"embed_turns_s": 0.0, "embed_questions_s": 0.0, "build_time_s": 0.0, "search_time_s": 0.0,
              "turns": 0, "items": 0}  # fmt: skip
    # Build every conversation first, then search (build and search times apart).
    try:
        embed_turns, embed_questions = await prefetch_embeddings(
            memory, conversations, config, progress=progress
        )
        totals["embed_turns_s"] += embed_turns
        totals["embed_questions_s"] += embed_questions
        build_bar = tqdm(conversations, desc="build (raw)", unit="conv", disable=not progress)
        for conv in build_bar:
            for key, v in (await build_conversation(memory, conv, config)).items():
                totals[key] += v
        enriched = await enrich_conversations(memory, conversations, config, progress=progress)
        bar = tqdm(total=n_q, desc="search", unit="q", disable=not progress)
        for conv in conversations:
            conv_rows, timings = await evaluate_conversation(memory, conv, config, bar=bar)
            rows.extend(conv_rows)
            for key, v in timings.items():
                totals[key] += v
        bar.close()
    finally:
        if own:
            await memory.close()
    report = summarize(rows, config)
    if config.gold == "corrected":
        from memrl.eval.retrieval.gold import corrected_retrieval

        report["corrected"] = corrected_retrieval(rows, list(conversations), config)
    report.update(
        n_conversations=len(conversations),
        n_turns=totals["turns"],
        n_items=totals["items"],
        embedder=memory.embedder.name,
        embed_time_s=round(totals["embed_turns_s"] + totals["embed_questions_s"], 2),
        embed_turns_s=round(totals["embed_turns_s"], 2),
        embed_questions_s=round(totals["embed_questions_s"], 2),
        build_time_s=round(totals["build_time_s"], 2),
        search_time_s=round(totals["search_time_s"], 2),
        enrich=enriched,
        wall_time_s=round(time.perf_counter() - t0, 2),
        config=config.to_dict(),
    )
    if config.output_dir:
        write_outputs(Path(config.output_dir), report, rows)
    report["rows"] = rows
    return report


def evaluate_retrieval(
    conversations: Sequence[Conversation], config: RetrievalConfig, *, progress: bool = True
) -> dict[str, Any]:
    """Synchronous :func:`aevaluate`: the report dict (with per-question ``rows``); writes outputs if asked."""
    return asyncio.run(aevaluate(conversations, config, progress=progress))
