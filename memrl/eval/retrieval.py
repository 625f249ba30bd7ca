"""Retrieval evaluation, no LLM: does search over the ``raw`` memory find the turns a question rests on?

For each conversation the ``raw`` builder stores every turn (and the data set's own memories, PerLTQA's)
into its own namespace of one store, then every question is searched in each mode (dense, bm25, hybrid)
and scored against its gold evidence: recall@k at evidence level (share of evidence ids in the top k) and
at session level (share of evidence ids whose session appears in the top k), per category and pooled,
with bootstrap 95% intervals. One retrieved id is one turn (or one memory), so recall@10 means ten.

Evidence per data set: LoCoMo's turns (categories 1-4 pooled; ``include_adversarial`` adds 5);
LongMemEval's ``has_answer`` turns (session level: its evidence sessions); PerLTQA's memory ids (a
dialogue id is found by any of its turns, an event / relationship / profile id by its memory item);
HotpotQA's gold documents (found by any of their sentences). A data set without evidence (MemAgent's
published eval files) is refused with a :class:`ConfigError`. Every figure carries the number of
questions behind it (``n``); a figure with no question behind it is ``None`` (``null`` in JSON). Run::

    memrl eval retrieval --dataset locomo --output-dir runs/retrieval      # time: bench/retrieval.py
    memrl eval retrieval --ablation                                         # what each idea bought

or from Python: ``evaluate_retrieval(load_conversations(cfg), cfg)`` with ``cfg = RetrievalConfig()``.

``output_dir`` receives ``questions.jsonl`` (one line per question: evidence, retrieved turn ids per mode,
recalls), ``summary.json``, ``report.md`` and ``recall.png``. The defaults (here, in :class:`RawConfig`
and in :class:`~memrl.memory.search.SearchOptions`) are the best settings of the ablation study
(:func:`ablation_steps`): neighbour context as a BM25 view, pooled dense vectors, speaker/time/date priors,
convex fusion. Knobs were tuned on conversations 0-4; the ablation also reports conversations 5-9 apart.
All conversations are built before any question is searched, because FTS5's BM25 statistics are global
to the store: every question then sees the same index. Before building, every text to embed (all turns,
then all questions) is embedded up front, longest first, in blocks (:func:`prefetch_embeddings`): one
pass with little padding instead of one call per conversation.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from memrl.agents.raw import RawConfig
from memrl.config import option
from memrl.data.types import Conversation, Question
from memrl.errors import ConfigError
from memrl.eval.retrieval_report import (  # noqa: F401  (re-exported: old imports keep working)
    CORE_CATEGORIES,
    headline,
    plot,
    report_markdown,
    summarize,
    write_outputs,
)
from memrl.eval.retrieval_search import (  # noqa: F401  (re-exported)
    build_conversation,
    evaluate_conversation,
    namespace_of,
    prefetch_embeddings,
)
from memrl.memory.facade import AsyncMemory
from memrl.memory.search import SearchOptions

Mode = Literal["dense", "bm25", "hybrid"]
_S = SearchOptions()  # search's defaults are the evaluation's defaults (the best measured settings)


@dataclasses.dataclass(frozen=True)
class RetrievalConfig:
    """Every knob of a retrieval evaluation; ``memrl eval retrieval`` flags map 1:1 onto the fields
    (``raw`` is the builder's own config, whose fields are flags too). Defaults: the best measured settings."""

    dataset: str = option(
        "locomo", "benchmark: locomo, longmemeval, perltqa, hotpotqa, ruler-hotpotqa, ruler-locomo or sample"
    )
    data_path: str | None = option(None, "data file or folder (default: found in $MEMRL_DATA_DIR)")
    conv_id: tuple[str, ...] = option((), "only these conversations (LoCoMo sample ids, question ids, names)")
    lengths: tuple[str, ...] = option((), "ruler-hotpotqa / ruler-locomo: context lengths, e.g. 7k,14k")
    modes: tuple[Mode, ...] = option(("dense", "bm25", "hybrid"), "search modes to evaluate")
    k: tuple[int, ...] = option((1, 5, 10, 20), "cut-offs of recall@k")
    include_adversarial: bool = option(False, "also evaluate category 5 (adversarial) questions")
    embedder: str = option(
        "minilm", "embedder: minilm (offline), mpnet, hashing[:DIM], openai:MODEL, st:NAME"
    )
    db_path: str | None = option(
        None, "store file or postgresql:// URL (default: in memory); reusing one reuses embeddings"
    )
    embed_cache: str = option(
        "auto",
        "file caching embeddings across runs: auto ($MEMRL_CACHE_DIR or ~/.cache/memrl/embeddings.db), "
        "a path, or none",
    )
    output_dir: str | None = option(None, "write questions.jsonl, summary.json, report.md, recall.png here")
    candidates: int = option(_S.candidates, "depth of each ranked list (dense, bm25) before fusion")
    rrf_k: int = option(_S.rrf_k, "k of reciprocal rank fusion: 1/(k + rank)")
    dense_weight: float = option(_S.weights[0], "weight of the dense list in fusion")
    bm25_weight: float = option(_S.weights[1], "weight of the BM25 list in fusion")
    fusion: Literal["rrf", "convex"] = option(
        _S.fusion, "hybrid fusion: rrf (reciprocal rank) or convex (weighted min-max normalised scores)"
    )
    speaker_boost: float = option(
        _S.speaker_boost,
        "when the question names one speaker, add this share of the best score to their turns",
    )
    strip_speaker: bool = option(
        _S.strip_speaker,
        "drop the one speaker a question names from its BM25 query (the speaker prior does that job)",
    )
    date_boost: float = option(
        _S.date_boost,
        "when the question names a month/year, add this share of the best score to turns of then",
    )
    time_boost: float = option(
        _S.time_boost,
        "when the question asks when, add this share of the best score to turns with a time expression",
    )
    diversity: float = option(
        _S.diversity, "each result already picked from a session lowers that session's others by this share"
    )
    session_boost: float = option(
        _S.session_boost,
        "add this share of the best score times the turn's session's share of the candidates' score",
    )
    question_words: bool = option(
        _S.question_words, "drop words that shape a question (kind, likely, would, ...) from its BM25 query"
    )
    abstract_dense_weight: float | None = option(
        None if _S.abstract_weights is None else _S.abstract_weights[0],
        "dense weight (bm25: 1 minus it) for questions asking an inference (Would X likely.., Based on.. "
        "what might..); default: the usual weights",
    )
    session_stage: float = option(
        _S.session_stage, "two-stage: add this share of the best score to turns of the best sessions (BM25)"
    )
    session_top: int = option(_S.session_top, "two-stage: how many of the best sessions get the prior")
    spread: float = option(_S.spread, "entity graph: weight of spreading activation from the first hits")
    spread_seeds: int = option(_S.spread_seeds, "entity graph: how many first hits activate their entities")
    spread_max_share: float = option(
        _S.spread_max_share, "entity graph: entities in more than this share of the turns are not links"
    )
    tagger: str = option(_S.tagger, "entity tagger for the graph: rule or spacy (pip install memrl[ner])")
    prf_docs: int = option(
        _S.prf_docs, "pseudo-relevance feedback: expand the BM25 query from this many hits"
    )
    prf_terms: int = option(_S.prf_terms, "pseudo-relevance feedback: expansion words")
    prf_weight: float = option(_S.prf_weight, "pseudo-relevance feedback: weight of the expanded list")
    date_fit: float = option(
        _S.date_fit, "time-aware: add this share of the best score to turns whose dates fit the question's"
    )
    window: float = option(_S.window, "window view: weight of the best cosine over a turn and its neighbours")
    rerank: str | None = option(
        _S.rerank, "learned reranker: locomo or locomo-mpnet (shipped), a model JSON file, or none"
    )
    rerank_depth: int = option(
        _S.rerank_depth, "learned reranker: how many of the first candidates it re-orders"
    )
    enrich: str | None = option(
        None,
        "write-time enrichment: this LLM (local, local:MODEL, openai:MODEL) writes retrieval keys for every "
        "turn after building; search fuses them as a BM25 view (no LLM at query time). Default: off",
    )
    enrich_weight: float = option(0.3, "enrichment: fusion weight of the keys view (0: keys not searched)")
    enrich_base_url: str | None = option(
        None, "enrichment: URL of an OpenAI-compatible server (openai:MODEL)"
    )
    enrich_cache: str = option(
        "auto",
        "enrichment: file caching the LLM's replies (a re-run is warm): auto ($MEMRL_CACHE_DIR or "
        "~/.cache/memrl/llm.db), a path, or none",
    )
    enrich_concurrency: int = option(16, "enrichment: requests in flight (the local model's batch size)")
    enrich_new_only: bool = option(
        False, "enrichment: keep only keywords with a word that is not already in the turn or the one before"
    )
    bootstrap: int = option(1000, "bootstrap resamples for the 95 percent confidence intervals")
    seed: int = option(0, "seed of the bootstrap")
    raw: RawConfig = dataclasses.field(default_factory=RawConfig, metadata={"help": "raw builder config"})

    def __post_init__(self) -> None:
        if not self.modes or any(m not in ("dense", "bm25", "hybrid") for m in self.modes):
            raise ConfigError(f"modes must be a non-empty subset of dense, bm25, hybrid; got {self.modes!r}")
        if not self.k or any(k < 1 for k in self.k):
            raise ConfigError(f"k must be positive cut-offs, e.g. 1 5 10 20; got {self.k!r}")
        if self.candidates < 1 or self.rrf_k < 0 or self.bootstrap < 1:
            raise ConfigError("candidates and bootstrap must be >= 1 and rrf_k >= 0")
        if self.enrich in ("", "none"):
            object.__setattr__(self, "enrich", None)
        if self.enrich_weight < 0 or self.enrich_concurrency < 1:
            raise ConfigError("enrich_weight must be >= 0 and enrich_concurrency >= 1")
        from memrl.data.catalog import canonical

        object.__setattr__(self, "dataset", canonical(self.dataset))

    @property
    def max_k(self) -> int:
        return max(self.k)

    @property
    def categories(self) -> tuple[int, ...]:
        return (*CORE_CATEGORIES, 5) if self.include_adversarial else CORE_CATEGORIES

    def selects(self, q: Question) -> bool:
        """Whether question ``q`` is evaluated: LoCoMo's categories 1-4 (and 5 if asked), otherwise every
        answerable question (abstention questions too with ``include_adversarial``)."""
        if q.category_id is not None:
            return q.category_id in self.categories
        return q.answerable or self.include_adversarial

    def search_options(self) -> dict[str, Any]:
        """Keyword arguments of :meth:`AsyncMemory.search` (besides query, namespace, mode, top_k)."""
        return {
            "candidates": self.candidates,
            "rrf_k": self.rrf_k,
            "weights": (self.dense_weight, self.bm25_weight),
            "fusion": self.fusion,
            "collapse": "unit",
            "speaker_boost": self.speaker_boost,
            "session_boost": self.session_boost,
            "date_boost": self.date_boost,
            "strip_speaker": self.strip_speaker,
            "diversity": self.diversity,
            "time_boost": self.time_boost,
            "prf_docs": self.prf_docs,
            "prf_terms": self.prf_terms,
            "prf_weight": self.prf_weight,
            "question_words": self.question_words,
            "abstract_weights": None
            if self.abstract_dense_weight is None
            else (self.abstract_dense_weight, 1.0 - self.abstract_dense_weight),
            "session_stage": self.session_stage,
            "session_top": self.session_top,
            "spread": self.spread,
            "spread_seeds": self.spread_seeds,
            "spread_max_share": self.spread_max_share,
            "tagger": self.tagger,
            "date_fit": self.date_fit,
            "window": self.window,
            "rerank": None if self.rerank in (None, "", "none") else self.rerank,
            "rerank_depth": self.rerank_depth,
            "keys": self.enrich_weight if self.enrich else 0.0,
        }

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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
    # Build every conversation first: FTS5's BM25 statistics are global to the store, so every question
    # should see the same index (all conversations), whatever the order.
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
