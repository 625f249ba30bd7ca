"""What a memory system is to the harness: ingest a session, search for a question, say what it cost.

The answerer and the judge are the harness's, the same for every system (``memrl eval --system NAME``):
a system only remembers and retrieves. Its results are memory texts, shown to the answerer as the
numbered memory lines of memrl's own answer prompt (:func:`memrl.scoring.answer.answer_from_lines`).

    system = create_system("mem0", settings)              # memrl.eval.systems
    cost = await system.ingest_session(conversation, session)
    lines, cost = await system.search(conversation, question, top_k=10)
    await system.close()

A system that calls an LLM or an embedder of its own is pointed at ``settings.base_url`` (any
OpenAI-compatible endpoint) through a metering proxy (:class:`memrl.eval.systems.meter.Meter`), so its
calls and tokens are counted at the wire, whatever client it uses.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from memrl.data.types import Conversation, Question, Session

T = TypeVar("T")


@dataclass
class Cost:
    """What one operation cost: LLM calls and tokens, embedding calls, seconds."""

    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    embed_calls: int = 0
    seconds: float = 0.0

    def to_dict(self, prefix: str = "") -> dict[str, Any]:
        return {
            f"{prefix}{k}": (round(v, 4) if isinstance(v, float) else v) for k, v in self.__dict__.items()
        }


@dataclass(frozen=True)
class SystemSettings:
    """Where a system's own LLM and embedder calls go, and the store it may keep on disk."""

    base_url: str | None = None  # OpenAI-compatible endpoint of the system's own LLM and embedder
    model: str | None = None  # its chat model
    embed_model: str = "text-embedding-3-small"
    embed_dims: int = 1536
    api_key: str = "memrl-harness"  # sent to base_url (a real key for api.openai.com)
    data_dir: str | None = None  # where the system keeps its store (a run's folder)
    builder: str = "raw"  # memrl:BUILDER
    embedder: str = "minilm"  # memrl's own embedder (memrl:BUILDER)
    llm: Any = field(default=None, compare=False)  # memrl's builder LLM (memrl:membuilder)


class MemorySystem(ABC):
    """One memory system behind the harness. ``ingest_session`` and ``search`` are called one at a time."""

    name: str = "system"

    @abstractmethod
    async def ingest_session(self, conversation: Conversation, session: Session) -> Cost: ...

    @abstractmethod
    async def search(
        self, conversation: Conversation, question: Question, top_k: int
    ) -> tuple[list[str], Cost]:
        """The memory texts the system retrieves for ``question``, best first, and what it cost."""

    async def close(self) -> None:  # noqa: B027 (optional)
        return None


class MeteredSystem(MemorySystem):
    """A system whose own calls go through a :class:`~memrl.eval.systems.meter.Meter`: each operation runs
    under one lock, so the meter's difference across it is its cost (blocking clients run in a thread)."""

    def __init__(self, settings: SystemSettings) -> None:
        from memrl.errors import ConfigError
        from memrl.eval.systems.meter import Meter

        if not settings.base_url:
            raise ConfigError(f"--system {self.name} needs --system-base-url (or --base-url): the OpenAI-compatible "
                              "endpoint its own LLM and embedder calls go to")  # fmt: skip
        self.settings = settings
        self.meter = Meter(settings.base_url).start()
        self._lock = asyncio.Lock()

    async def metered(self, work: Callable[[], Awaitable[T]]) -> tuple[T, Cost]:
        async with self._lock:
            before, t0 = self.meter.snapshot(), time.perf_counter()
            result = await work()
            d = self.meter.snapshot() - before
        return result, Cost(
            d.llm_calls, d.prompt_tokens, d.completion_tokens, d.embed_calls, time.perf_counter() - t0
        )

    async def close(self) -> None:
        self.meter.stop()


def session_messages(conversation: Conversation, session: Session) -> list[dict[str, str]]:
    """A session as chat messages for a system that ingests chats: the first speaker is the user, the other
    the assistant (LoCoMo's two people; LongMemEval's own roles), each line ``Name: text``, dated."""
    first = conversation.speakers[0] if conversation.speakers else None
    out = []
    for t in session.turns:
        role = (
            t.speaker
            if t.speaker in ("user", "assistant")
            else ("user" if t.speaker == first else "assistant")
        )
        out.append({"role": role, "content": t.render()})
    if out and session.date_text:
        out[0] = {**out[0], "content": f"[{session.date_text}] {out[0]['content']}"}
    return out
