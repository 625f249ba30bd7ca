"""memrl's own builders behind the :class:`~memrl.eval.systems.base.MemorySystem` interface
(``--system memrl:raw``, ``memrl:membuilder``, ``memrl:annotations``), so that a comparison runs every
system through the same ingest / search / answer path. (``--system memrl``, the default, runs the same
builder and search on memrl's native path, which also resumes an interrupted build.)

A session is one ``Builder.build_session`` into a store in the run's folder (one namespace per
conversation); its cost is the builder's own (LLM calls and tokens: membuilder's agents; none for raw).
A question is one ``AsyncMemory.search``, each hit shown as the answer prompt shows memrl's memories,
then the core memory, if any, as one more line.
"""

from __future__ import annotations

import time
from pathlib import Path

from memrl.data.types import Conversation, Question, Session
from memrl.eval.systems.base import Cost, MemorySystem, SystemSettings


class MemrlSystem(MemorySystem):
    def __init__(self, settings: SystemSettings) -> None:
        from memrl.agents.base import create_builder
        from memrl.memory import AsyncMemory

        self.name = f"memrl:{settings.builder}"
        kw = {"llm": settings.llm} if settings.builder == "membuilder" else {}
        self.builder = create_builder(settings.builder, **kw)
        db = Path(settings.data_dir or ".") / "memrl-system.db"
        self.memory = AsyncMemory(str(db), embedder=settings.embedder)

    async def ingest_session(self, conversation: Conversation, session: Session) -> Cost:
        t0 = time.perf_counter()
        r = await self.builder.build_session(self.memory, conversation.id, conversation, session)
        return Cost(r.llm_calls, r.prompt_tokens, r.completion_tokens, 0, time.perf_counter() - t0)

    async def search(
        self, conversation: Conversation, question: Question, top_k: int
    ) -> tuple[list[str], Cost]:
        from memrl.scoring.answer import shown_memory

        t0 = time.perf_counter()
        hits = await self.memory.search(question.question, namespace=conversation.id, top_k=top_k)
        lines = [shown_memory(h) for h in hits]
        core = (await self.memory.core(namespace=conversation.id)).strip()
        if core:
            lines.append(f"Core memory: {core}")
        return lines, Cost(seconds=time.perf_counter() - t0)

    async def close(self) -> None:
        await self.memory.close()
