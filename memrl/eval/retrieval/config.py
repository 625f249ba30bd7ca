"""What a retrieval evaluation depends on: :class:`RetrievalConfig`, whose fields are the flags of
``memrl eval retrieval`` and whose defaults are the best measured settings (see docs/evaluation.md).

The bottom of the retrieval evaluation: :mod:`memrl.eval.retrieval.search` (the work on the store),
:mod:`memrl.eval.retrieval.report` (the figures) and :mod:`memrl.eval.retrieval.run` (the run) all import it::

    cfg = RetrievalConfig(dataset="locomo", modes=("hybrid",), k=(10,))
    memory.search(question, namespace=ns, mode="hybrid", top_k=10, **cfg.search_options())
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from memrl.agents.raw import RawConfig
from memrl.config import option
from memrl.data.types import Question
from memrl.errors import ConfigError
from memrl.memory.search import SearchOptions

#: LoCoMo's answerable categories (1-4), pooled in every headline figure; category 5 only when asked for.
CORE_CATEGORIES = (1, 2, 3, 4)

#: The figures a row carries besides ``recall`` and ``session_recall`` (both per mode, then per k):
#: NDCG@k at turn and session level and whether *all* evidence was found (LongMemEval's ``recall_all``).
EXTRA_LEVELS = ("ndcg", "session_ndcg", "recall_all", "session_recall_all")

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
    fusion: Literal["rrf", "convex", "adaptive"] = option(
        _S.fusion,
        "hybrid fusion: rrf (reciprocal rank), convex (weighted min-max normalised scores) or "
        "adaptive (convex, the dense weight chosen per query by --fusion-model)",
    )
    fusion_model: str | None = option(
        None, "adaptive fusion's fitted model: a name (memrl/resources/fusion_NAME.json) or a JSON path"
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
    aggregate_diversity: float = option(
        _S.aggregate_diversity,
        "diversity for questions that gather facts (How many, total, different, all the)",
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
    spread_seed_share: float = option(
        _S.spread_seed_share, "entity graph: the seeds are at most this share of the turns (small stores)"
    )
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
    gold: Literal["original", "corrected"] = option(
        "original", "LoCoMo: corrected also reports recall against locomo-audit's corrected evidence"
    )
    audit_path: str | None = option(
        None, "locomo-audit's errors.json (default: DATA/locomo-audit/errors.json)"
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
        if self.gold == "corrected" and self.dataset != "locomo":
            raise ConfigError(
                f"--gold corrected applies locomo-audit's evidence to LoCoMo, not {self.dataset}"
            )

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
            "fusion_model": self._fusion_model(),
            "collapse": "unit",
            "speaker_boost": self.speaker_boost,
            "session_boost": self.session_boost,
            "date_boost": self.date_boost,
            "strip_speaker": self.strip_speaker,
            "diversity": self.diversity,
            "aggregate_diversity": self.aggregate_diversity,
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
            "spread_seed_share": self.spread_seed_share,
            "spread_max_share": self.spread_max_share,
            "tagger": self.tagger,
            "date_fit": self.date_fit,
            "window": self.window,
            "rerank": None if self.rerank in (None, "", "none") else self.rerank,
            "rerank_depth": self.rerank_depth,
            "keys": self.enrich_weight if self.enrich else 0.0,
        }

    def _fusion_model(self) -> tuple[float, ...] | None:
        if self.fusion != "adaptive":
            return None
        if not self.fusion_model:
            raise ConfigError(
                "--fusion adaptive needs --fusion-model NAME or PATH (bench/fusion_fit.py fits one)"
            )
        from memrl.memory.search import load_model

        return load_model(self.fusion_model)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
