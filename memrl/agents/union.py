"""The ``union`` builder: raw turns and a builder's notes side by side in one namespace ("raw + notes").

Issue 61: raw storage and the SFT MemBuilder fail on different questions (per question the SFT builder was
better on 106 of LoCoMo's 411 test questions, raw on 157; the per-question best of the two scores 12.4
against raw's 9.0). This builder keeps both: each session's turns stored as the ``raw`` builder stores
them, then the notes builder's agents (``membuilder``, or ``annotations``: the expert's memory) writing
their memory into the same namespace, so one search ranks turns and notes together and the answerer reads
both. Every item says where it came from in its metadata, ``origin`` = ``raw`` or ``notes``; the notes
agents are shown only notes (their UPDATE and MERGE never touch a turn)::

    memrl eval --dataset locomo --split test --builder union --provider local --builder-model memrl:membuilder-sft
    memrl eval --dataset locomo --split validation --builder union --builder-option notes=annotations

Options: ``notes=membuilder|annotations`` (default ``membuilder``); every other ``--builder-option`` is
the notes builder's (a trained adapter's own options apply as with ``--builder membuilder``). The raw part
uses the ``raw`` builder's defaults.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

from memrl.agents.base import Builder, SessionResult, create_builder
from memrl.agents.raw import RawBuilder, RawConfig, add_vectors, session_items
from memrl.data.types import Conversation, Session
from memrl.errors import ConfigError
from memrl.memory import AsyncMemory

__all__ = ["NOTES", "UnionBuilder"]

#: Builders whose memory can be the notes.
NOTES = ("membuilder", "annotations")


class UnionBuilder(Builder):
    """Raw turns (``origin=raw``) and a notes builder's memory (``origin=notes``) in one namespace."""

    name = "union"

    def __init__(self, options: Iterable[str] = (), *, llm: Any = None, raw: RawConfig | None = None) -> None:
        rest, notes = [], "membuilder"
        for opt in options:
            key, _, value = opt.partition("=")
            if key.strip() == "notes":
                notes = value.strip()
            else:
                rest.append(opt)
        if notes not in NOTES:
            raise ConfigError(f"union: notes must be one of {NOTES}, got {notes!r}")
        self.notes_name = notes
        self.raw = RawBuilder(raw)
        self.notes = create_builder(notes, options=rest, **({"llm": llm} if notes == "membuilder" else {}))
        self.config = getattr(self.notes, "config", None)

    def _label(self, conversation: Conversation) -> None:
        """Make the notes agents write ``origin=notes`` and see only notes."""
        agent = self.notes.agent(conversation) if hasattr(self.notes, "agent") else self.notes
        agent.label = {"origin": "notes"}

    async def build_memories(
        self, memory: AsyncMemory, namespace: str, conversation: Conversation
    ) -> SessionResult | None:
        return await self.raw.build_memories(memory, namespace, conversation)

    async def build_session(
        self, memory: AsyncMemory, namespace: str, conversation: Conversation, session: Session
    ) -> SessionResult:
        t0 = time.perf_counter()
        self._label(conversation)
        # Notes first: the agents read the memory as it was before this session, like the notes builder
        # alone (the session's own turns are in their prompt).
        result = await self.notes.build_session(memory, namespace, conversation, session)
        t_raw = time.perf_counter()
        items = session_items(session, self.raw.config)
        items = [dataclasses.replace(it, metadata={**it.metadata, "origin": "raw"}) for it in items]
        items = await add_vectors(memory, session, items, self.raw.config)
        if items:
            await memory.add_many(items, namespace=namespace, actor="raw")
        rows = await memory.list(namespace=namespace)
        by_origin = Counter(str(i.metadata.get("origin")) for i in rows)
        result.stats.update(
            notes=self.notes_name,
            raw_added=len(items),
            raw_seconds=round(time.perf_counter() - t_raw, 3),
            items=len(rows),
            items_by_origin=dict(sorted(by_origin.items())),
        )
        result.seconds = time.perf_counter() - t0
        return result
