"""The one rollout record every agent produces and every trainer consumes.

A :class:`Trajectory` is what an agent did for one task (a session to memorise, a memory to update, a
document to read): its LLM calls (:class:`Step`: the messages sent, the reply, tool calls and their
results, and, when the back-end knows them, token ids and the sampled tokens' logprobs), the reward it
earned, metrics, and a failure reason if it broke. A failed rollout is data, not a crash: it is recorded
with ``failure`` set and is never silently given a reward.

``token_view()`` flattens a trajectory into the form RL trainers need: one token sequence with a loss
mask (1 = tokens the model generated, 0 = prompt, tool results and other context).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Step:
    """One LLM call within a trajectory."""

    messages: list[dict[str, Any]]
    response: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    tool_results: list[dict[str, Any]] = field(default_factory=list)
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    role: str = ""  # which sub-agent made the call (e.g. "episodic" in MemBuilder)
    # what the reply was sampled under, so a trainer can rebuild the behaviour distribution:
    # the constraint record (memrl.llm.base.constraint_of; None = unconstrained) and the temperature
    constraint: dict[str, Any] | None = None
    temperature: float | None = None

    @classmethod
    def from_response(cls, messages: list[dict[str, Any]], reply: Any, *, role: str = "") -> Step:
        """From a :class:`memrl.llm.base.ChatResponse`."""
        return cls(
            messages=list(messages),
            response=reply.text,
            tool_calls=[
                {"id": c.id, "name": c.name, "arguments": c.arguments, "error": c.error}
                for c in reply.tool_calls
            ],
            prompt_ids=reply.prompt_ids,
            completion_ids=reply.completion_ids,
            logprobs=reply.logprobs,
            prompt_tokens=reply.usage.prompt_tokens,
            completion_tokens=reply.usage.completion_tokens,
            role=role,
            constraint=getattr(reply, "constraint", None),
            temperature=getattr(reply, "temperature", None),
        )


@dataclass
class Trajectory:
    """What one agent did for one task, and how it went."""

    agent: str
    task_id: str
    steps: list[Step] = field(default_factory=list)
    reward: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt_tokens(self) -> int:
        return sum(s.prompt_tokens for s in self.steps)

    @property
    def completion_tokens(self) -> int:
        return sum(s.completion_tokens for s in self.steps)

    @property
    def has_tokens(self) -> bool:
        return bool(self.steps) and all(
            s.prompt_ids is not None and s.completion_ids is not None for s in self.steps
        )

    def token_view(self) -> tuple[list[int], list[int], list[float]]:
        """``(input_ids, loss_mask, logprobs)`` over the whole trajectory.

        Each step contributes the part of its prompt not already in the sequence (new context: mask 0),
        then its completion (mask 1, with its logprobs). Steps whose prompt does not extend the sequence
        so far (a new conversation, as MemBuilder's four agents are) start a new segment appended after
        the previous one; trainers that need one sequence per call should use ``steps`` directly.
        """
        if not self.has_tokens:
            raise ValueError(
                f"trajectory {self.task_id!r} has no token ids (use a back-end that returns them)"
            )
        ids: list[int] = []
        mask: list[int] = []
        lps: list[float] = []
        segment: list[int] = []
        for s in self.steps:
            prompt = s.prompt_ids or []
            if segment and prompt[: len(segment)] == segment:
                new = prompt[len(segment) :]
            else:
                new, segment = prompt, []
            ids += new
            mask += [0] * len(new)
            lps += [0.0] * len(new)
            comp = s.completion_ids or []
            ids += comp
            mask += [1] * len(comp)
            if s.logprobs is None or len(s.logprobs) != len(comp):
                raise ValueError(
                    f"trajectory {self.task_id!r}: a step has {len(comp)} completion tokens but "
                    f"{0 if s.logprobs is None else len(s.logprobs)} logprobs (a 0.0 stand-in would corrupt ratios)"
                )
            lps += list(s.logprobs)
            segment = segment + new + comp if segment else prompt + comp
        return ids, mask, lps

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        steps = [Step(**s) for s in d.get("steps", [])]
        return cls(**{**d, "steps": steps})
