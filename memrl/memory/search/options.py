"""How a search runs: :class:`SearchOptions` (every retrieval feature and its default, measured best on
LoCoMo) and :data:`PLAIN` (every feature off: plain RRF hybrid search). Used by
:class:`memrl.memory.search.hybrid.SearchIndex`, the facade and the retrieval evaluation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from memrl.memory.records.types import MemoryType

SearchMode = Literal["hybrid", "dense", "bm25"]

Fusion = Literal["rrf", "convex", "adaptive"]


@dataclass(frozen=True)
class SearchOptions:
    """How a search runs. ``threshold`` is a minimum cosine similarity, applied in every mode.

    The defaults are the best settings measured on LoCoMo (``memrl eval retrieval --ablation``; knobs tuned on
    conversations 0-4), checked on LoCoMo's training conversations and LongMemEval part A together
    (``bench/search_defaults.py``: ``spread_seed_share`` and ``aggregate_diversity`` come from there; the
    fusion weights 0.4/0.6 from its leave-one-dataset-out protocol, ``--lodo``).
    ``SearchOptions(**PLAIN)`` is the plain search of before: RRF (k=60, equal weights) over 50 candidates
    per list, no collapsing, no priors.

    Retrieval features (each can be switched off, which gives the plain behaviour):

    - ``collapse``: metadata key naming the unit an item represents (the ``raw`` builder's ``unit`` = turn
      id). Items of one unit are collapsed into one hit, in each ranked list before fusion (max-pooling),
      so a unit stored in several views counts once. Items without the key are never collapsed.
    - ``fusion``: ``rrf`` (``sum w / (rrf_k + rank)``) or ``convex`` (``sum w * minmax(score)`` over each
      list's candidates, missing = 0) or ``adaptive``: convex with the dense weight chosen per query by
      ``fusion_model`` (:mod:`memrl.memory.search.adaptive`: bias and one coefficient per feature of the two
      lists and the query; BM25's weight is 1 minus it; ``weights`` and ``abstract_weights`` unused).
    - ``speaker_boost``: when the query names exactly one of the values of metadata ``speaker_key`` found
      among the candidates (whole word, any case), that speaker's items get ``speaker_boost`` times the
      best candidate's score added. Questions about a person are mostly answered by what they said. A
      question in the first person ("How often do I ...?") is about the speaker called ``user`` when the
      candidates have one (a user/assistant chat; :func:`memrl.memory.analysis.query.speakers_meant`).
    - ``strip_speaker``: when the query names exactly one of the namespace's speakers, BM25 runs without
      the name (every item of theirs carries it, so it matches everything they said; the speaker prior
      does that job).
    - ``date_boost``: when the query mentions a month and/or year ("in October 2023"), items whose
      metadata ``date_key`` (ISO) falls in it get ``date_boost`` times the best score added.
    - ``time_boost``: when the query asks about time ("When did...", "How long..."), items whose metadata
      ``time_key`` is true (the ``raw`` builder marks turns with a time expression) get ``time_boost``
      times the best score added.
    - ``question_words``: BM25 runs without the words that shape a question but do not occur in its
      answer ("kind", "likely", "would", :data:`memrl.memory.analysis.words.QUESTION_WORDS`).
    - ``abstract_weights``: (dense, bm25) fusion weights used instead of ``weights`` when the query asks
      for an inference (:func:`memrl.memory.analysis.query.asks_abstract`: "Would X likely...", "Based on...,
      what might..."), whose answers rarely share its words.
    - ``prf_docs``: pseudo-relevance feedback for BM25: the ``prf_terms`` words most frequent in the top
      ``prf_docs`` hits (in at least two of them) expand the query; the expanded list's min-max normalised
      scores, times ``prf_weight``, are added to the original's. Off by default: it bought nothing beyond
      noise in the ablation (README) for several times the BM25 search time.
    - ``diversity``: results are picked greedily; each already picked result from the same session
      lowers a candidate's score by ``diversity`` times the best score (questions that aggregate over
      the conversation have evidence in many sessions).
    - ``aggregate_diversity``: ``diversity`` for the queries that gather facts only
      (:func:`memrl.memory.analysis.query.asks_aggregate`: "How many...", "the total...", "all the...").
    - ``session_stage``: two-stage retrieval: sessions are ranked first (BM25 over each session's turns as
      one document, :func:`memrl.memory.search.expand.session_scores`); candidates of the ``session_top`` best
      sessions get ``session_stage`` times the best score, times their session's score over the best
      session's, added.
    - ``spread``: spreading activation over the entity graph (:func:`memrl.memory.search.expand.spread`): the
      ``spread_seeds`` best candidates (at most ``spread_seed_share`` of the units: in a small store the
      best 30 are most of it) activate the entities they name (``tagger``: ``rule`` or ``spacy``), which
      pass it on to every unit naming them; the result, scaled to ``spread`` times the best score, is
      added (units reached that were not candidates join the ranking). With ``types`` or ``filters`` only
      candidates are re-scored.
    - ``date_fit``, ``window``, ``rerank`` (``rerank_depth``): time-aware prior, window max-similarity
      view, learned reranker (:mod:`memrl.memory.search.rerank`).
    - ``keys``: weight of the items' retrieval keys (:mod:`memrl.memory.store.keys`: extra text a builder or an
      LLM enrichment pass attached to an item) as a third ranked list, BM25 over the keys with the same
      query as the BM25 list, fused like the others (hybrid: a third convex/RRF weight; bm25 mode: added
      to the BM25 list with this weight). 0 (default): the keys are not read.
    - ``session_boost``: every item gets ``session_boost`` times its session's share of the candidates'
      total score (sum over the session's candidates / best session's sum) times the best score added:
      evidence clusters in sessions that match the query as a whole.
    """

    mode: SearchMode = "hybrid"
    top_k: int = 10
    types: tuple[MemoryType, ...] | None = None
    filters: dict[str, Any] | None = None
    threshold: float | None = None
    candidates: int = 100  # depth of each ranked list before fusion
    rrf_k: int = 60
    weights: tuple[float, float] = (0.4, 0.6)  # (dense, bm25); 0.3/0.7 before issue 60's protocol
    fusion: Fusion = "convex"
    fusion_model: tuple[float, ...] | None = None  # adaptive fusion's coefficients (adaptive.load_model)
    collapse: str | None = "unit"
    speaker_key: str | None = "speaker"
    speaker_boost: float = 0.5
    strip_speaker: bool = True
    date_key: str | None = "date"
    date_boost: float = 0.2
    time_key: str | None = "mentions_time"
    time_boost: float = 0.4
    question_words: bool = True
    abstract_weights: tuple[float, float] | None = None
    diversity: float = 0.0
    aggregate_diversity: float = 0.1  # ``diversity`` for questions that gather facts (asks_aggregate)
    prf_docs: int = 0
    prf_terms: int = 8
    prf_weight: float = 0.3
    session_boost: float = 0.0
    session_stage: float = 0.1
    session_top: int = 3
    spread: float = 0.2
    spread_seeds: int = 30  # 20 before issue 39's joint tuning (LoCoMo train + LongMemEval part A)
    spread_seed_share: float = 0.125  # the seeds are at most this share of the namespace's units (1 in 8)
    spread_max_share: float = 0.05
    tagger: str = "rule"
    date_fit: float = 0.2  # 0.1 before issue 39's joint tuning
    window: float = 0.2
    rerank: str | None = None
    rerank_depth: int = 50
    keys: float = 0.0


#: Options that turn every retrieval feature off: plain RRF hybrid search (the baseline).
PLAIN: dict[str, Any] = {
    "candidates": 50,
    "rrf_k": 60,
    "weights": (1.0, 1.0),
    "fusion": "rrf",
    "collapse": None,
    "speaker_boost": 0.0,
    "strip_speaker": False,
    "date_boost": 0.0,
    "time_boost": 0.0,
    "diversity": 0.0,
    "aggregate_diversity": 0.0,
    "session_boost": 0.0,
    "session_stage": 0.0,
    "spread": 0.0,
    "question_words": False,
    "date_fit": 0.0,
    "window": 0.0,
    "rerank": None,
    "keys": 0.0,
}
