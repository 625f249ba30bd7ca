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
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from memrl.agents.raw import RawConfig, build, memory_items, session_items, texts_to_embed
from memrl.config import option
from memrl.data.types import Conversation, Question
from memrl.errors import ConfigError
from memrl.eval.metrics import LOCOMO_CATEGORIES, locomo_session_of, recall_at_k, session_recall_at_k
from memrl.eval.stats import bootstrap_ci, to_markdown
from memrl.memory.facade import AsyncMemory
from memrl.memory.search import SearchOptions

Mode = Literal["dense", "bm25", "hybrid"]
_S = SearchOptions()  # search's defaults are the evaluation's defaults (the best measured settings)
CORE_CATEGORIES = (1, 2, 3, 4)
_PREFETCH_BLOCK = 1024  # texts per embedding call when the evaluation embeds everything up front


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
    embedder: str = option("minilm", "embedder: minilm (offline), hashing[:DIM], openai:MODEL, st:NAME")
    db_path: str | None = option(None, "store file (default: in memory); reusing a file reuses embeddings")
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
    rerank: str | None = option(_S.rerank, "learned reranker: locomo (shipped), a model JSON file, or none")
    rerank_depth: int = option(
        _S.rerank_depth, "learned reranker: how many of the first candidates it re-orders"
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
        }

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def open_memory(config: RetrievalConfig) -> AsyncMemory:
    """The store the evaluation builds into, its embedder wrapped in the cross-run cache (``embed_cache``)."""
    from memrl.memory.embedders import CachedEmbedder, create_embedder, default_cache_path

    embedder = create_embedder(config.embedder)
    if config.embed_cache != "none" and not config.embedder.startswith("hashing"):
        path = default_cache_path() if config.embed_cache == "auto" else config.embed_cache
        embedder = CachedEmbedder(embedder, path)
    return AsyncMemory(config.db_path or ":memory:", embedder=embedder)


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


def namespace_of(conv: Conversation) -> str:
    return f"{conv.id}@raw"


def _turn_ids(hits: Sequence[Any], k: int) -> list[str]:
    """Distinct turn ids of the hits, best first, at most ``k`` (an item's evidence is its turn)."""
    out: list[str] = []
    for h in hits:
        for e in h.item.evidence[:1]:
            if e not in out:
                out.append(e)
    return out[:k]


async def prefetch_embeddings(
    memory: AsyncMemory,
    conversations: Sequence[Conversation],
    config: RetrievalConfig,
    *,
    progress: bool = False,
) -> tuple[float, float]:
    """Embed every text the evaluation will need (each conversation's turns as the ``raw`` builder indexes
    them, then every selected question) in one call per kind, so the embedder sorts all texts by length
    at once and pads little; the vectors land in the store's cache, so building and searching then embed
    nothing. Returns (turn seconds, question seconds); (0, 0) when no mode is dense."""
    from tqdm.auto import tqdm

    if not any(m != "bm25" for m in config.modes):
        return 0.0, 0.0
    turns: list[str] = []
    for conv in conversations:
        items = [it for s in conv.sessions for it in session_items(s, config.raw)]
        turns += texts_to_embed(conv.sessions, items, config.raw)
        turns += [it.content for it in memory_items(conv, config.raw)]
    questions = [q.question for c in conversations for q in c.questions if config.selects(q)]
    t0 = time.perf_counter()
    # Longest first, in blocks: the embedder pads each batch to its longest text, and a bar shows progress.
    turns = sorted(dict.fromkeys(turns), key=len, reverse=True)
    with tqdm(total=len(turns), desc="embed turns", unit="text", disable=not progress) as bar:
        for i in range(0, len(turns), _PREFETCH_BLOCK):
            await memory.index.vectors(turns[i : i + _PREFETCH_BLOCK])
            bar.update(len(turns[i : i + _PREFETCH_BLOCK]))
    t1 = time.perf_counter()
    if questions:
        await memory.index.vectors(list(dict.fromkeys(questions)))
    return t1 - t0, time.perf_counter() - t1


async def build_conversation(
    memory: AsyncMemory, conv: Conversation, config: RetrievalConfig
) -> dict[str, float]:
    """Store ``conv`` with the ``raw`` builder into its namespace; returns timings and counts."""
    stats = await build(memory, namespace_of(conv), conv, config=config.raw)
    await memory.index.sync(namespace_of(conv))  # pooled vectors are derived here, not in the first search
    return {"embed_turns_s": stats.embed_time_s, "build_time_s": stats.time_s, "turns": stats.turns,
            "items": stats.items}  # fmt: skip


async def evaluate_conversation(
    memory: AsyncMemory, conv: Conversation, config: RetrievalConfig, *, bar: Any = None
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Search every question of an already built ``conv`` in every mode: (per-question rows, timings)."""
    ns = namespace_of(conv)
    questions: list[Question] = [q for q in conv.questions if config.selects(q)]
    session_of = _session_lookup(conv)
    t0 = time.perf_counter()
    dense = any(m != "bm25" for m in config.modes)
    qvecs = await memory.index.vectors([q.question for q in questions]) if dense and questions else None
    embed_q = time.perf_counter() - t0
    opts = config.search_options()
    rows = []
    t_search = time.perf_counter()
    for i, q in enumerate(questions):
        row: dict[str, Any] = {
            "question_id": q.id,
            "conversation": conv.id,
            "category": q.category,
            "category_id": q.category_id,
            "question": q.question,
            "evidence": list(q.evidence),
            "retrieved": {},
            "recall": {},
            "session_recall": {},
        }
        for mode in config.modes:
            qv = None if mode == "bm25" or qvecs is None else qvecs[i]
            hits = await memory.search(
                q.question, namespace=ns, top_k=config.max_k, mode=mode, query_vector=qv, **opts
            )
            ids = _turn_ids(hits, config.max_k)
            row["retrieved"][mode] = ids
            # a retrieved turn also accounts for its session's id (a PerLTQA dialogue, a document)
            row["recall"][mode] = {str(k): recall_at_k(conv.covered(ids[:k]), q.evidence) for k in config.k}
            row["session_recall"][mode] = {str(k): _session_recall(ids[:k], q, session_of) for k in config.k}
        rows.append(row)
        if bar is not None:
            bar.update(1)
    return rows, {"embed_questions_s": embed_q, "search_time_s": time.perf_counter() - t_search}


def _session_lookup(conv: Conversation) -> Any:
    """Evidence or retrieved id -> session number. LoCoMo ids carry their session ("D3:12" -> 3), so a
    LoCoMo evidence id that names no turn still has one (as in the official script)."""
    if conv.source in ("locomo", "sample"):
        return lambda e: conv.session_of(e) or locomo_session_of(e)
    return conv.session_of


def _session_recall(ids: Sequence[str], q: Question, session_of: Any) -> float | None:
    """Per evidence id, whether its session is among the retrieved ids' sessions; a question whose
    evidence names no session (LongMemEval without ``has_answer`` turns) uses its evidence sessions."""
    if any(session_of(e) is not None for e in q.evidence):
        return session_recall_at_k(ids, q.evidence, session_of)
    if not q.evidence_sessions:
        return None
    found = {session_of(i) for i in ids}
    return sum(s in found for s in q.evidence_sessions) / len(q.evidence_sessions)


def _stat(values: list[float | None], config: RetrievalConfig) -> dict[str, Any]:
    """Mean and 95% interval over the values that exist, and how many there are; ``None`` when none."""
    vals = [v for v in values if v is not None]
    if not vals:
        return {"n": 0, "mean": None, "ci_low": None, "ci_high": None}
    mean, lo, hi = bootstrap_ci(vals, n_resamples=config.bootstrap, seed=config.seed)
    return {"n": len(vals), "mean": mean, "ci_low": lo, "ci_high": hi}


def summarize(rows: list[dict[str, Any]], config: RetrievalConfig) -> dict[str, Any]:
    """Per mode: recall@k (turn and session level) per category and pooled (LoCoMo: categories 1-4)."""
    locomo = any(r["category_id"] is not None for r in rows)
    groups: dict[str, list[dict[str, Any]]] = (
        {LOCOMO_CATEGORIES[c]: [] for c in config.categories} if locomo else {}
    )
    for r in rows:
        groups.setdefault(r["category"], []).append(r)
    core = [r for r in rows if r["category_id"] is None or r["category_id"] in CORE_CATEGORIES]
    pools = {**groups, "overall": core}
    if config.include_adversarial:
        pools["all"] = rows
    modes: dict[str, Any] = {}
    for mode in config.modes:
        m: dict[str, Any] = {"recall_at_k": {}, "session_recall_at_k": {}, "by_category": {}}
        for name, pool in pools.items():
            cat: dict[str, Any] = {"n": len(pool), "recall_at_k": {}, "session_recall_at_k": {}}
            for k in config.k:
                for level in ("recall", "session_recall"):
                    cat[f"{level}_at_k"][str(k)] = _stat([r[level][mode][str(k)] for r in pool], config)
            m["by_category"][name] = cat
        for level in ("recall_at_k", "session_recall_at_k"):
            m[level] = {k: v["mean"] for k, v in m["by_category"]["overall"][level].items()}
        modes[mode] = m
    headline_mode = "hybrid" if "hybrid" in config.modes else config.modes[0]
    return {
        "recall_at_10": modes[headline_mode]["recall_at_k"].get("10"),
        "headline_mode": headline_mode,
        "n_questions": len(core),
        "n_questions_all": len(rows),
        # how many questions the headline rests on (the others have no evidence to find)
        "n_with_evidence": modes[headline_mode]["by_category"]["overall"]["recall_at_k"][str(max(config.k))][
            "n"
        ]
        if config.k
        else 0,
        "modes": modes,
    }


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


# ---------------------------------------------------------------------------------------------- output
def _fmt(value: float | None) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def _ci(s: dict[str, Any]) -> str:
    return "-" if s.get("ci_low") is None else f"{s['ci_low']:.3f}-{s['ci_high']:.3f}"


def report_markdown(report: dict[str, Any]) -> str:
    """Markdown: a recall@k table per mode (rows: categories, then overall), with 95% intervals."""
    cfg = report.get("config", {})
    lines = [
        f"# Retrieval evaluation: {cfg.get('dataset', '?')} (raw builder, no LLM)",
        "",
        f"{report['n_questions']} questions ({report.get('n_with_evidence', '?')} with evidence) in "
        f"{report.get('n_conversations', '?')} conversations, {report.get('n_turns', '?')} turns; embedder "
        f"{report.get('embedder', '?')}; wall time {report.get('wall_time_s', '?')} s (embedding "
        f"{report.get('embed_time_s', '?')} s).",
        f"Headline: **recall@10 = {_fmt(report['recall_at_10'])}** ({report['headline_mode']}, pooled"
        + (", LoCoMo categories 1-4" if cfg.get("dataset") in ("locomo", "sample") else "")
        + "). Recall is per evidence id; a retrieved id is one turn or memory. n = questions with evidence.",
    ]
    if cfg:
        lines += ["", "Config: `" + json.dumps(cfg, default=str) + "`"]
    for mode, m in report["modes"].items():
        for level, title in (("recall_at_k", "turn"), ("session_recall_at_k", "session")):
            table = []
            for cat, c in m["by_category"].items():
                row: dict[str, Any] = {"category": cat, "n": c[level][next(iter(c[level]))]["n"]}
                for k, s in c[level].items():
                    row[f"@{k}"] = _fmt(s["mean"])
                    row[f"@{k} 95% CI"] = _ci(s)
                table.append(row)
            lines += ["", f"## {mode}: {title}-level recall@k", "", to_markdown(table)]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    """recall@k per category (one line each), one panel per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(report["modes"])
    fig, axes = plt.subplots(1, len(modes), figsize=(4.2 * len(modes), 3.6), sharey=True, squeeze=False)
    for ax, mode in zip(axes[0], modes, strict=True):
        for cat, c in report["modes"][mode]["by_category"].items():
            ks = [int(k) for k in c["recall_at_k"]]
            ys = [c["recall_at_k"][str(k)]["mean"] for k in ks]
            ys = [math.nan if y is None else y for y in ys]
            ax.plot(ks, ys, marker="o", label=cat, linewidth=2.5 if cat == "overall" else 1.2)
        ax.set_title(mode)
        ax.set_xlabel("k (turns)")
        ax.set_xscale("log")
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("evidence recall@k")
    axes[0][0].set_ylim(0, 1)
    axes[0][-1].legend(fontsize=8, loc="lower right")
    fig.suptitle(f"{report.get('config', {}).get('dataset', '')} evidence recall@k, raw builder")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(out: Path, report: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with (out / "questions.jsonl").open("w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    (out / "summary.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "report.md").write_text(report_markdown(report))
    plot(report, out / "recall.png")


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """The compact JSON the CLI prints last: recall@10 (hybrid, cat 1-4), per mode and per category."""
    modes = {}
    for mode, m in report["modes"].items():
        modes[mode] = {
            "recall_at_k": m["recall_at_k"],
            "session_recall_at_k": m["session_recall_at_k"],
            "by_category": {
                cat: {
                    "n": next(iter(c["recall_at_k"].values()))["n"],
                    **{
                        k: None if s["mean"] is None else round(s["mean"], 4)
                        for k, s in c["recall_at_k"].items()
                    },
                }
                for cat, c in m["by_category"].items()
            },  # fmt: skip
        }
    return {
        "dataset": report.get("config", {}).get("dataset"),
        "recall_at_10": report["recall_at_10"],
        "n_questions": report["n_questions"],
        "n_with_evidence": report.get("n_with_evidence"),
        "n_turns": report.get("n_turns"),
        "wall_time_s": report.get("wall_time_s"),
        "embed_time_s": report.get("embed_time_s"),
        "modes": modes,
    }
