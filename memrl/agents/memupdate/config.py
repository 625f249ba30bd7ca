"""How a MemUpdate episode runs (:class:`MemUpdateConfig`), what it reports (:class:`UpdateResult`) and the
job description the model reads (:data:`SYSTEM_PROMPT`); the agent is :mod:`memrl.agents.memupdate.agent`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from memrl.agents.trajectory import Trajectory
from memrl.config import option
from memrl.errors import ConfigError, ValidationError
from memrl.llm.base import SamplingParams

SYSTEM_PROMPT = """\
You maintain the long-term memory database of an assistant that answers questions about a long \
conversation between {speakers}. Improve the database so that future questions are answered better:
- fix memories that are wrong or vague (manage_memory with operation "update");
- merge memories that repeat the same fact (merge_memory);
- split memories that mix several facts or events (split_memory);
- add facts that are missing, with their dates (manage_memory with operation "create");
- delete memories that are useless or redundant (delete_memory).
Use search_memory and sample_memory to look at the database first. Memories are shown as \
"[id] (type, date) content"; copy ids exactly. You may make at most {budget} tool calls. When the \
database is good, reply with a short summary of your changes and no tool call."""


@dataclass(frozen=True)
class MemUpdateConfig:
    """How a MemUpdate episode runs (budgets, what the model is shown, how it samples)."""

    max_tool_calls: int = option(30, "tool calls per episode; the episode stops when they are used up")
    max_turns: int = option(30, "LLM calls per episode")
    tool_choice: Literal["auto", "required"] = option(
        "auto",
        "auto: the model ends the episode by replying in text; required: it must call a tool every turn",
    )
    sample_size: int = option(10, "memories shown in the first message (0: none)")
    sample_strategy: Literal["random", "diverse", "recent"] = option(
        "diverse", "how the memories shown first are picked"
    )
    question_hits: int = option(5, "with a target question, also show what a search for it finds now (0: no)")
    max_tool_chars: int = option(2000, "tool results shown to the model are cut to this many characters")
    temperature: float = option(0.0, "sampling temperature (0: greedy)")
    top_p: float = option(1.0, "nucleus sampling mass")
    max_tokens: int = option(512, "tokens per model reply")
    seed: int | None = option(None, "sampling seed (None: unseeded unless greedy)")
    tool_seed: int = option(0, "seed of the tools' random choices (sample_memory)")
    actor: str = option("memupdate", "actor name recorded in the store's history for every change")
    probes: int = option(
        8,
        "other questions of the conversation whose loss of coverage the reward subtracts (collateral "
        "damage of an edit; 0: none)",
    )

    def __post_init__(self) -> None:
        if self.max_tool_calls < 1 or self.max_turns < 1:
            raise ConfigError("max_tool_calls and max_turns must be >= 1")
        if not 0 <= self.sample_size <= 50 or not 0 <= self.question_hits <= 50:
            raise ConfigError("sample_size and question_hits must be between 0 and 50")
        if not 0 <= self.probes <= 200:
            raise ConfigError("probes must be between 0 and 200")
        if self.max_tool_chars < 100:
            raise ConfigError("max_tool_chars must be >= 100 (the model must see at least an error message)")
        try:
            _ = self.sampling  # SamplingParams checks temperature, top_p and max_tokens
        except ValidationError as e:
            raise ConfigError(str(e)) from None

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens, seed=self.seed
        )


@dataclass
class UpdateResult:
    """What one update episode did: counts, cost, failures, and the trajectory (with the reward, if any)."""

    namespace: str
    conversation: str
    trajectory: Trajectory
    question: str | None = None
    stop_reason: str = ""
    items_before: int = 0
    items_after: int = 0
    calls_by_tool: dict[str, int] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def reward(self) -> float | None:
        return self.trajectory.reward

    def to_dict(self, *, with_trajectory: bool = False) -> dict[str, Any]:
        t = self.trajectory
        d = {k: v for k, v in self.__dict__.items() if k != "trajectory"}
        d.update(
            llm_calls=len(t.steps),
            prompt_tokens=t.prompt_tokens,
            completion_tokens=t.completion_tokens,
            reward=t.reward,
            metrics=dict(t.metrics),
        )
        if with_trajectory:
            d["trajectory"] = t.to_dict()
        return d
