"""The ``annotations`` builder: MemBuilder's memory as the annotation expert writes it, with no model.

MemBuilder's SFT targets (:func:`memrl.agents.membuilder.experts.annotation_expert`) are the data set's own
human annotations (LoCoMo's per-session observations and events) written as MemBuilder actions. This builder
runs MemBuilder's four agents with that expert in place of the model, session by session, so the memory
it leaves is exactly the one the expert's actions build: the ceiling a student trained by SFT on those
actions can reach, measured with the same answerer and retrieval as every other builder::

    memrl eval --dataset locomo --split test --builder annotations --provider local

Only building is model-free: answering still uses ``--provider``. No model runs while building, so its
sessions report 0 LLM calls and 0 tokens (the expert's replies are recorded in ``stats["expert_words"]``).
Options are :class:`AnnotationsConfig`'s (``--builder-option ...``): MemBuilder's, with two differences.
``max_operations`` defaults to 10, the most the action schema allows, because LoCoMo annotates about ten
observations a session (8.5 to 10.1 per conversation) and a cut at MemBuilder's default of 3 drops two
thirds of them; and ``core`` says what the expert keeps in core memory: ``first`` (the default), each
speaker's first observation of the first session only, about 300 characters, inside ADRPO's core length
target (150 tokens); ``sessions``, those of every session, which fills the block to its compression limit
and triples the answer prompt. Both were chosen on LoCoMo's training conversations (docs/results/builders.md).

Three more (issue 61, what the expert's answers teach as SFT targets): ``core_skip`` (on) offers the core
agent SKIP, and the expert keeps core memory with it instead of a REPLACE of a line by itself;
``dedupe`` (on) drops a fact the prompt's memory shows or the answer already holds; ``interleave``
(on) takes the speakers in turn when a cut is needed. The memory is the same with ``core_skip`` and
``dedupe`` on or off (a no-op is a no-op; LoCoMo's annotations repeat no fact exactly, and the store
refuses an exact repeat). ``interleave`` does change it, in the 93 of LoCoMo's 272 sessions with more than
10 observations: from 2f39d65 to issue 61 the builder asked for it but the expert never received it, so the
annotations rows measured in that span (f1ae712 onwards) and the shipped SFT adapter's data are
``interleave=false,core_skip=false,dedupe=false``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memrl.agents.base import Builder, SessionResult
from memrl.agents.membuilder.agent import MemBuilderAgent
from memrl.agents.membuilder.config import MemBuilderConfig
from memrl.agents.membuilder.experts import CORE_MODES, annotation_expert
from memrl.config import option
from memrl.data.types import Conversation, Session
from memrl.errors import ConfigError
from memrl.memory import AsyncMemory

__all__ = ["AnnotationsBuilder", "AnnotationsConfig"]


@dataclass(frozen=True)
class AnnotationsConfig(MemBuilderConfig):
    """MemBuilder's knobs, with the expert's: all of a session's annotations by default, and ``core``."""

    max_operations: int = option(10, "at most this many items per type and session (schema maxItems)")
    core: str = option("first", f"what the expert keeps in core memory: one of {CORE_MODES}")
    core_skip: bool = option(True, "offer core SKIP; the expert keeps core with it (false: a self-REPLACE)")
    dedupe: bool = option(True, "the expert adds no fact the prompt shows or its answer already holds")
    interleave: bool = option(True, "the expert takes the speakers in turn when max_operations cuts")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.core not in CORE_MODES:
            raise ConfigError(f"core must be one of {CORE_MODES}, got {self.core!r}")


class AnnotationsBuilder(Builder):
    """MemBuilder's agents answered by the annotation expert (registered as ``annotations``)."""

    name = "annotations"

    def __init__(self, config: MemBuilderConfig | None = None, **_: Any) -> None:
        self.config = config or AnnotationsConfig()
        self._agents: dict[str, MemBuilderAgent] = {}

    def agent(self, conversation: Conversation) -> MemBuilderAgent:
        """The MemBuilder agents of ``conversation``, answered by its annotations (one expert each)."""
        if conversation.id not in self._agents:
            cfg = self.config
            expert = annotation_expert(
                conversation,
                max_items=cfg.max_operations,
                max_chars=cfg.max_item_chars,
                core=getattr(cfg, "core", "sessions"),
                interleave=getattr(cfg, "interleave", True),
                dedupe=getattr(cfg, "dedupe", False),
            )
            self._agents[conversation.id] = MemBuilderAgent(expert, cfg)
        return self._agents[conversation.id]

    async def build_session(
        self, memory: AsyncMemory, namespace: str, conversation: Conversation, session: Session
    ) -> SessionResult:
        result = await self.agent(conversation).build_session(memory, namespace, conversation, session)
        # The scripted expert counts words as tokens; no model ran, so the build cost no tokens.
        result.stats["expert_words"] = result.completion_tokens
        result.llm_calls = result.prompt_tokens = result.completion_tokens = 0
        for agent in result.stats.get("agents", {}).values():
            agent["prompt_tokens"] = agent["completion_tokens"] = 0
        return result
