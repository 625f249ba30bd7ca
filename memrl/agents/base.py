"""What a memory builder is: something that turns a conversation, session by session, into memory.

Builders (``raw``: every turn stored, no LLM; ``membuilder``: four LLM agents per session;
``annotations``: those four agents answered by the data set's annotations, no LLM; ``union``: raw turns
and one of those two's notes in one namespace) implement
``build_session``. The evaluation runner builds one session at a time and records each finished session,
so an interrupted build resumes at the first unfinished session (after rolling back its partial changes
with the store's history). Registry: ``create_builder("raw")``.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from memrl.agents.trajectory import Trajectory
from memrl.data.types import Conversation, Session
from memrl.errors import ConfigError
from memrl.memory import AsyncMemory


@dataclass
class SessionResult:
    """What building one session did: counts, cost, trajectories (for trainers) and failures."""

    session: int
    stats: dict[str, Any] = field(default_factory=dict)
    trajectories: list[Trajectory] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    def to_dict(self, *, with_trajectories: bool = False) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "trajectories"}
        if with_trajectories:
            d["trajectories"] = [t.to_dict() for t in self.trajectories]
        return d


class Builder(ABC):
    """Builds memory for a conversation into one namespace of a store."""

    name: str = "builder"

    async def build_memories(
        self, memory: AsyncMemory, namespace: str, conversation: Conversation
    ) -> SessionResult | None:
        """Store the memories a data set gives besides the sessions (``conversation.memories``, e.g.
        PerLTQA's profile and events), before the first session; ``None`` when the builder keeps none
        (the default: a builder that reads dialogues, like MemBuilder, reads only the sessions)."""
        return None

    @abstractmethod
    async def build_session(
        self, memory: AsyncMemory, namespace: str, conversation: Conversation, session: Session
    ) -> SessionResult: ...

    async def build(
        self,
        memory: AsyncMemory,
        namespace: str,
        conversation: Conversation,
        *,
        sessions: Iterable[int] | None = None,
    ) -> list[SessionResult]:
        """Build the given sessions (1-based indices; all by default), in order."""
        wanted = None if sessions is None else set(sessions)
        return [
            await self.build_session(memory, namespace, conversation, s)
            for s in conversation.sessions
            if wanted is None or s.index in wanted
        ]


#: builder name -> ("module:factory", "module:ConfigClass"); imported only when asked for.
BUILDERS: dict[str, str] = {
    "raw": "memrl.agents.raw:RawBuilder",
    "membuilder": "memrl.agents.membuilder:MemBuilderAgent",
    "annotations": "memrl.agents.membuilder.annotations:AnnotationsBuilder",
    "union": "memrl.agents.union:UnionBuilder",  # raw turns + a builder's notes; options go to the notes
}
BUILDER_CONFIGS: dict[str, str] = {
    "raw": "memrl.agents.raw:RawConfig",
    "membuilder": "memrl.agents.membuilder:MemBuilderConfig",
    "annotations": "memrl.agents.membuilder.annotations:AnnotationsConfig",
}


def _load(target: str) -> Any:
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


def create_builder(name: str, *, options: Iterable[str] = (), **kwargs: Any) -> Builder:
    """Build a builder by name; ``options`` are ``KEY=VALUE`` settings of its config dataclass."""
    if name not in BUILDERS:
        raise ConfigError(f"unknown builder {name!r}; choose one of {sorted(BUILDERS)}")
    options = list(options)
    if name == "union":  # its options are the notes builder's (and notes=...): it parses them itself
        return _load(BUILDERS[name])(options, **kwargs)
    if name == "membuilder" and "config" not in kwargs:  # an adapter asks the prompts it learned on
        from memrl.llm.local.packaged import trained_options

        trained = trained_options(getattr(kwargs.get("llm"), "spec", None))
        if trained:
            import logging

            logging.getLogger(__name__).info("membuilder: the adapter's agent options %s", trained)
            options = [*trained, *options]  # given options override the adapter's
    if options:
        from memrl.config import parse_options

        if name not in BUILDER_CONFIGS:
            raise ConfigError(f"builder {name!r} takes no options")
        kwargs["config"] = parse_options(_load(BUILDER_CONFIGS[name]), options)
    return _load(BUILDERS[name])(**kwargs)
