"""The retrieval evaluation's work on the store: embed every text up front, build each conversation with
the ``raw`` builder, search each question in every mode and score what it found.

Used by :func:`memrl.eval.retrieval.run.aevaluate`::

    await prefetch_embeddings(memory, conversations, config)   # every turn, then every question, once
    for conv in conversations:
        await build_conversation(memory, conv, config)           # all before any search (global BM25)
    rows, timings = await evaluate_conversation(memory, conv, config)

Each question is searched once for all modes (:meth:`memrl.memory.search.hybrid.SearchIndex.search_modes`): the
dense and BM25 lists are computed once and each mode ranks from them, with exactly the hits a search in
that mode alone gives.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from memrl.agents.raw import build, memory_items, session_items, texts_to_embed
from memrl.data.types import Conversation, Question
from memrl.eval.retrieval.config import EXTRA_LEVELS, RetrievalConfig
from memrl.memory import AsyncMemory
from memrl.memory.search import SearchOptions
from memrl.scoring.metrics import locomo_session_of, ndcg_at_k, recall_at_k, session_recall_at_k

_PREFETCH_BLOCK = 1024  # texts per embedding call when the evaluation embeds everything up front


def namespace_of(conv: Conversation) -> str:
    return f"{conv.id}@raw"


def _turn_ids(hits: Sequence[Any], k: int) -> list[str]:
    """Distinct turn ids of the hits, best first, at most ``k`` (an item's evidence is its turn)."""
    out: dict[str, None] = {}
    for h in hits:
        for e in h.item.evidence[:1]:
            out[e] = None
    return list(out)[:k]


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
    opts = SearchOptions(top_k=session_depth(config), **config.search_options())
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
            "retrieved_sessions": {},
            "recall": {},
            "session_recall": {},
            **{level: {} for level in EXTRA_LEVELS},
        }
        # one search for all modes: they share the query's dense and BM25 lists (SearchIndex.search_modes)
        qv = None if qvecs is None else qvecs[i]
        trace: dict[str, Any] = {}  # adaptive fusion's signals (bench/fusion_fit.py fits on them)
        by_mode = await memory.index.search_modes(ns, q.question, opts, config.modes, query_vector=qv,
                                                  trace=trace)  # fmt: skip
        row["fusion"] = trace
        for mode in config.modes:
            ranked = _turn_ids(by_mode[mode], opts.top_k)
            ids = ranked[: config.max_k]
            row["retrieved"][mode] = ids
            # a retrieved turn also accounts for its session's id (a PerLTQA dialogue, a document)
            row["recall"][mode] = {str(k): recall_at_k(conv.covered(ids[:k]), q.evidence) for k in config.k}
            row["session_recall"][mode] = {str(k): _session_recall(ids[:k], q, session_of) for k in config.k}
            credited = _credited(ids, conv, q.evidence)
            row["ndcg"][mode] = {str(k): ndcg_at_k(credited, q.evidence, k) for k in config.k}
            row["recall_all"][mode] = {k: _all(v) for k, v in row["recall"][mode].items()}
            # LongMemEval's session level: the first k distinct sessions of the turn ranking
            sessions = list(dict.fromkeys(s for s in map(session_of, ranked) if s is not None))
            row["retrieved_sessions"][mode] = sessions[: config.max_k]
            gold = _evidence_sessions(q, session_of)
            row["session_ndcg"][mode] = {str(k): ndcg_at_k(sessions, gold, k) for k in config.k}
            row["session_recall_all"][mode] = {str(k): _all(recall_at_k(sessions, gold, k)) for k in config.k}
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


def session_depth(config: RetrievalConfig) -> int:
    """How many hits each search returns. The session-level NDCG and all@k rank the first k *distinct*
    sessions (LongMemEval's turn-to-session evaluation), which may lie deeper than ``max_k`` turns, so
    the search returns up to ``candidates`` hits: its candidate lists are ``max(candidates, top_k)`` deep,
    so asking for that many changes neither them nor the order of the first ``max_k`` hits, which alone
    give the turn figures and ``retrieved``. With ``diversity`` the re-ranking's pool grows with the
    number asked for, so there it stays ``max_k`` (a session ranking may then hold fewer than k)."""
    return config.max_k if config.diversity > 0 else max(config.max_k, config.candidates)


def _evidence_sessions(q: Question, session_of: Any) -> list[Any]:
    """The sessions a question's evidence lies in, as :func:`_session_recall` finds them: those of its
    evidence ids, else (no evidence id names a session) its evidence sessions."""
    named = [s for s in (session_of(e) for e in q.evidence) if s is not None]
    return list(dict.fromkeys(named)) if named else list(q.evidence_sessions)


def _credited(ids: Sequence[str], conv: Conversation, evidence: Sequence[str]) -> list[str]:
    """Each retrieved turn as the evidence id it accounts for: itself, or its session's id when the evidence
    cites the whole session (a PerLTQA dialogue, a HotpotQA document); NDCG credits such an id once, at
    the rank of its first turn. A turn that accounts for nothing stays itself."""
    wanted = set(evidence)
    out = []
    for r in ids:
        unit = conv.unit_of(r)
        out.append(unit if r not in wanted and unit is not None and unit in wanted else r)
    return out


def _all(recall: float | None) -> float | None:
    """1.0 when every evidence id was found (LongMemEval's ``recall_all``), 0.0 when not, None without any."""
    return None if recall is None else float(recall == 1.0)
