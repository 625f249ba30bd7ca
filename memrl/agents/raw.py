"""The ``raw`` builder: every turn of a conversation stored as one episodic memory, no LLM.

It is the baseline every memory agent is compared with, and the memory the retrieval evaluation
(:mod:`memrl.eval.retrieval`) searches. Each turn becomes one item whose id is the turn id (``D1:3``),
whose evidence is that turn alone and whose metadata says when and by whom it was said::

    from memrl.agents.raw import RawConfig, build
    stats = await build(memory, "conv-26@raw", conversation)          # resets the namespace first
    stats = await build(memory, ns, conversation, config=RawConfig(context_before=0))

What is *indexed* (the item's ``content``, which BM25 and the embedder see) is configurable: the session
date, the speaker, the shared image's caption, and neighbouring turns folded in as context. Folding in
neighbours helps because an answer is often a reply to a question ("What did you paint?" / "A sunset"):
the reply alone names neither the topic nor the asker. The item's evidence stays its own turn, so one
retrieved item is still one turn. ``metadata["text"]`` keeps the plain turn (``Speaker: text``) for a
reader that wants it without the context.

With ``views=("turn", "context")`` a turn is stored twice (the turn alone, id ``D1:3``, and with its
context, id ``D1:3+ctx``); both carry ``metadata["unit"] = turn id`` so search collapses them into one
hit (max-pooling per turn, :class:`memrl.memory.search.hybrid.SearchOptions` ``collapse``). The context view's
dense vector is pooled by default: the turn's vector plus a fraction of its neighbours', computed here
and stored as the item's own vector (``NewItem.vector``), so embedding costs one short text per turn;
``context_vector="embed"`` embeds the whole context text instead, and views left out of ``dense_views``
are lexical-only (``metadata["dense"] = False``: BM25 indexes them, nothing embeds them).

``build`` is idempotent per namespace: it drops the namespace first and stores the wanted sessions anew
(embeddings are cached by content hash, so a rebuild embeds nothing twice). The session-by-session
protocol of :class:`memrl.agents.base.Builder` (``RawBuilder.build_session``) only adds; the QA runner
rolls back half-built sessions itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import numpy as np

from memrl.agents.base import Builder, SessionResult
from memrl.config import option
from memrl.data.types import Conversation, Session, Turn
from memrl.errors import ConfigError
from memrl.memory import AsyncMemory
from memrl.memory.analysis import mentions_time
from memrl.memory.records import MemoryType
from memrl.memory.store import NewItem

View = Literal["turn", "context"]
DateStyle = Literal["long", "iso", "text", "none"]


@dataclass(frozen=True)
class RawConfig:
    """How each turn is rendered into the text that gets indexed (defaults: the best measured settings)."""

    date_style: DateStyle = option(
        "long",
        "session date prefixed to the indexed text: long ('8 May 2023'), iso ('2023-05-08'), text "
        "(the data set's own string, with the time of day) or none",
    )
    include_speaker: bool = option(True, "prefix the turn with its speaker ('Caroline: ...')")
    include_caption: bool = option(True, "append the caption of a shared image ('[shares a photo of ...]')")
    context_before: int = option(2, "turns before this one (same session) folded into the indexed text")
    context_after: int = option(2, "turns after this one (same session) folded into the indexed text")
    context_speakers: bool = option(True, "name the speaker of each neighbouring turn in the context")
    views: tuple[View, ...] = option(
        ("turn", "context"),
        "items stored per turn: 'turn' (the turn alone) and/or 'context' (with its neighbours); search "
        "collapses a turn's items into one hit",
    )
    dense_views: tuple[View, ...] = option(
        ("context",),
        "views dense search sees (the others are lexical-only: BM25 indexes them, nothing embeds them)",
    )
    context_vector: Literal["pool", "embed"] = option(
        "pool",
        "dense vector of the context view: pool (the turn's vector plus pool_weight times each neighbour's "
        "within pool_window, normalised: no extra embedding) or embed (embed the whole context text: slow)",
    )
    pool_window: int = option(1, "neighbours on each side pooled into the context view's vector")
    pool_weight: float = option(0.3, "weight of each pooled neighbour's vector (the turn's own is 1)")
    max_chars: int = option(4000, "indexed text is cut to this many characters")

    def __post_init__(self) -> None:
        if self.context_before < 0 or self.context_after < 0:
            raise ConfigError("context_before and context_after must be >= 0")
        if not self.views or any(v not in ("turn", "context") for v in self.views):
            raise ConfigError(f"views must be a non-empty subset of turn, context; got {self.views!r}")
        if len(set(self.views)) != len(self.views):
            raise ConfigError(f"views lists a view twice: {self.views!r}")
        if not set(self.dense_views) <= set(self.views):
            raise ConfigError(f"dense_views {self.dense_views!r} must be among views {self.views!r}")
        if self.pool_window < 0 or self.pool_weight < 0:
            raise ConfigError("pool_window and pool_weight must be >= 0")
        if not self.has_context and "turn" in self.views and "turn" not in self.dense_views:
            raise ConfigError(
                "with no context turns the context view is not stored, so dense search would see nothing: "
                "add 'turn' to dense_views or set context_before/context_after"
            )
        if self.max_chars < 100:
            raise ConfigError("max_chars must be at least 100")

    @property
    def has_context(self) -> bool:
        return self.context_before > 0 or self.context_after > 0


def session_date(session: Session, style: DateStyle) -> str | None:
    """The session's date rendered in ``style`` (``None`` when unknown or ``style == "none"``)."""
    if style == "none":
        return None
    if style == "text" or session.date is None:
        return session.date_text or None
    if style == "iso":
        return session.date.date().isoformat()
    return f"{session.date.day} {session.date:%B %Y}"


def render_turn(turn: Turn, config: RawConfig) -> str:
    if turn.image_caption and not config.include_caption:
        turn = replace(turn, image_caption=None)
    return turn.render(speaker=config.include_speaker)


def indexed_text(session: Session, position: int, config: RawConfig, *, context: bool) -> str:
    """The text indexed for turn ``session.turns[position]``: date, the turn, then (``context``) neighbours.

    The turn comes first so that a model with a short input window truncates the context, not the turn.
    """
    turn = session.turns[position]
    date = session_date(session, config.date_style)
    parts = [f"[{date}] " if date else "", render_turn(turn, config)]
    if context:
        lo = max(0, position - config.context_before)
        hi = min(len(session.turns), position + config.context_after + 1)
        ctx = replace(config, include_speaker=config.include_speaker and config.context_speakers)
        before = [render_turn(t, ctx) for t in session.turns[lo:position]]
        after = [render_turn(t, ctx) for t in session.turns[position + 1 : hi]]
        if before or after:
            parts.append("\n(context: " + " / ".join([*before, "...", *after]) + ")")
    return "".join(parts)[: config.max_chars]


def pooled_from(session: Session, position: int, config: RawConfig) -> dict[str, float]:
    """``{item id: weight}`` whose vectors make the context view's pooled vector: the turn, neighbours."""
    lo = max(0, position - config.pool_window)
    hi = min(len(session.turns), position + config.pool_window + 1)
    return {
        t.id: 1.0 if i == position else config.pool_weight
        for i, t in enumerate(session.turns)
        if lo <= i < hi
    }


def session_items(session: Session, config: RawConfig) -> list[NewItem]:
    """The items of one session, in turn order (one per turn and view), without their vectors.

    Pooled context views (``context_vector="pool"``) carry ``metadata["pool"]`` = ``{turn id: weight}``
    until :func:`add_vectors` turns it into the item's vector."""
    items = []
    for pos, turn in enumerate(session.turns):
        meta: dict[str, Any] = {
            "turn_id": turn.id,
            "unit": turn.id,
            "speaker": turn.speaker,
            "session": session.index,
            "date": session.date.isoformat() if session.date else None,
            "date_text": session.date_text,
            "text": turn.render(speaker=True),
            "mentions_time": mentions_time(turn.text),
        }
        for view in config.views:
            with_context = view == "context" and config.has_context
            if view == "context" and not with_context and "turn" in config.views:
                continue  # no neighbours configured: the context view would duplicate the turn view
            extra: dict[str, Any] = {}
            if view not in config.dense_views:
                extra["dense"] = False
            elif view == "context" and config.context_vector == "pool":
                extra["pool"] = pooled_from(session, pos, config)
            items.append(
                NewItem(
                    content=indexed_text(session, pos, config, context=with_context),
                    type=MemoryType.EPISODIC,
                    metadata={**meta, "view": view, **extra},
                    evidence=(turn.id,),
                    session=str(session.index),
                    id=turn.id if view == "turn" else f"{turn.id}+ctx",
                )
            )
    return items


def memory_items(conversation: Conversation, config: RawConfig) -> list[NewItem]:
    """The conversation's own memories (PerLTQA's profile, relationships, events), one item each.

    An item's id and evidence are the memory id questions cite; events are episodic and dated, profile
    fields and relationships semantic. Every view indexes the memory alone (it has no neighbours)."""
    items = []
    for m in conversation.memories:
        date = None
        if m.date is not None and config.date_style != "none":
            date = m.date_text if config.date_style == "text" else (
                m.date.date().isoformat() if config.date_style == "iso" else f"{m.date.day} {m.date:%B %Y}"
            )  # fmt: skip
        content = (f"[{date}] " if date else "") + m.text
        items.append(
            NewItem(
                content=content[: config.max_chars],
                type=MemoryType.parse(m.type),
                metadata={"unit": m.id, "memory_id": m.id, "kind": m.kind, "text": m.text,
                          "date": m.date.isoformat() if m.date else None, "date_text": m.date_text},
                evidence=(m.id,),
                id=m.id,
            )
        )  # fmt: skip
    return items


async def store_memories(
    memory: AsyncMemory, namespace: str, conversation: Conversation, config: RawConfig
) -> int:
    """Store :func:`memory_items` atomically; returns how many."""
    items = memory_items(conversation, config)
    if items:
        await memory.add_many(items, namespace=namespace, actor="raw")
    return len(items)


def texts_to_embed(sessions: Sequence[Session], items: Sequence[NewItem], config: RawConfig) -> list[str]:
    """Texts whose embeddings the items need: items embedded as they are, and the turns pools are made of."""
    own = [it.content for it in items if it.metadata.get("dense") is not False and "pool" not in it.metadata]
    if not any("pool" in it.metadata for it in items):
        return own
    bases = [indexed_text(s, pos, config, context=False) for s in sessions for pos in range(len(s.turns))]
    return list(dict.fromkeys(own + bases))


async def add_vectors(
    memory: AsyncMemory, session: Session, items: list[NewItem], config: RawConfig
) -> list[NewItem]:
    """Give pooled context views their vector: the normalised sum of weight x embedding of each turn of
    the pool (the turn alone, as its turn view is indexed), computed with the memory's embedder."""
    pooled = [it for it in items if "pool" in it.metadata]
    if not pooled:
        return items
    base_text = {
        t.id: indexed_text(session, pos, config, context=False) for pos, t in enumerate(session.turns)
    }
    ids = list(base_text)
    vecs = dict(zip(ids, await memory.index.vectors([base_text[i] for i in ids]), strict=True))
    out = []
    for it in items:
        if "pool" in it.metadata:
            meta = dict(it.metadata)
            pool = meta.pop("pool")
            acc = sum(w * vecs[i] for i, w in pool.items())
            it = replace(it, metadata=meta, vector=acc / (np.linalg.norm(acc) or 1.0))
        out.append(it)
    return out


async def store_session(memory: AsyncMemory, namespace: str, session: Session, config: RawConfig) -> int:
    """Store one session's items atomically (pooled vectors computed first); returns how many."""
    items = await add_vectors(memory, session, session_items(session, config), config)
    if items:
        await memory.add_many(items, namespace=namespace, actor="raw")
    return len(items)


@dataclass
class BuildStats:
    """What :func:`build` did."""

    namespace: str
    turns: int = 0
    items: int = 0
    sessions: int = 0
    embed_time_s: float = 0.0
    time_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def build(
    memory: AsyncMemory,
    namespace: str,
    conversation: Conversation,
    *,
    sessions: Iterable[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
    config: RawConfig | None = None,
) -> BuildStats:
    """Store the turns of ``conversation`` (only ``sessions``, 1-based, if given) into ``namespace``.

    The namespace is reset first, so building twice gives the same memory. ``progress(done, total)`` is
    called after each session with turn counts. Embedding time is measured apart from storing.
    """
    config = config or RawConfig()
    t0 = time.perf_counter()
    wanted = None if sessions is None else set(sessions)
    chosen = [s for s in conversation.sessions if wanted is None or s.index in wanted]
    items = [it for s in chosen for it in session_items(s, config)]
    await memory.reset(namespace=namespace)
    t_embed = time.perf_counter()
    # Embed everything up front (one big batch is faster, and it times embedding apart from storing).
    own = memory_items(conversation, config)
    await memory.index.vectors(texts_to_embed(chosen, items, config) + [it.content for it in own])
    stats = BuildStats(namespace, embed_time_s=time.perf_counter() - t_embed)
    stats.items += await store_memories(memory, namespace, conversation, config)
    total = sum(len(s.turns) for s in chosen)
    for s in chosen:
        stats.items += await store_session(memory, namespace, s, config)
        stats.turns += len(s.turns)
        stats.sessions += 1
        if progress is not None:
            progress(stats.turns, total)
    stats.time_s = time.perf_counter() - t0
    return stats


class RawBuilder(Builder):
    """The :class:`~memrl.agents.base.Builder` protocol over :func:`session_items` (registered as ``raw``)."""

    name = "raw"

    def __init__(self, config: RawConfig | None = None) -> None:
        self.config = config or RawConfig()

    async def build_memories(
        self, memory: AsyncMemory, namespace: str, conversation: Conversation
    ) -> SessionResult | None:
        if not conversation.memories:
            return None
        t0 = time.perf_counter()
        n = await store_memories(memory, namespace, conversation, self.config)
        return SessionResult(session=0, stats={"memories": n, "items": n}, seconds=time.perf_counter() - t0)

    async def build_session(
        self, memory: AsyncMemory, namespace: str, conversation: Conversation, session: Session
    ) -> SessionResult:
        t0 = time.perf_counter()
        n = await store_session(memory, namespace, session, self.config)
        return SessionResult(
            session=session.index,
            stats={"turns": len(session.turns), "items": n},
            seconds=time.perf_counter() - t0,
        )


def turn_ids(items: Sequence[NewItem]) -> list[str]:
    """The distinct turn ids of ``items``, in order (helper for tests and reports)."""
    return list(dict.fromkeys(it.metadata["turn_id"] for it in items))
