"""MemBuilder's ADRPO rewards: session QA accuracy, length penalties, and attribution weights.

Per session, the four agents' actions (core, episodic, semantic, procedural) are applied to the
pre-session memory and up to five synthetic questions about the session are answered from it (LLM judge,
0/1). Then, per agent (REFERENCE.md section 2)::

    task = correct / 5                    (an agent whose JSON did not parse gets 0)
    r    = task * (1 - 0.8 * LP)          (LP only when task > 0)

memrl also subtracts what the memory answers by chance (``task_reward(chance=...)``: decoy questions the
session does not answer, asked the same way; :func:`memrl.agents.membuilder.adrpo.decoy_questions`), so likely
answers written whatever the session said are not paid: task = (correct - chance) / 5, signed, in [-1, 1], and
an agent whose JSON did not parse gets the floor, -1.

* core agent: t = chars / 4; LP = 0 if t <= 150, 1 if t >= 400, linear between
  (:func:`core_length_penalty`; chars = the text the core agent wrote this session); with the expert's
  core write for the session known, the larger of that and the relative penalty below (core memory is
  read with every question: what the expert kept in 20 tokens is not free at 150);
* other agents: rho = (model + s) / (expert + s) lengths, s = 50 tokens of smoothing; LP = 0 if
  0.5 <= rho <= 1.3, (rho - 1.3) / 0.7 above, (0.5 - rho) / 0.3 below, capped at 1
  (:func:`relative_length_penalty`). The original skipped the penalty whenever the two lengths differed
  by fewer than 200 tokens: every agent could write 200 tokens (800 characters) beyond the expert for
  free, and a policy copying the session verbatim into the four agents in pieces of that size beat the
  expert (0.362 against 0.262). The smoothing does the job the gap did (no explosive ratio when the expert
  wrote a few tokens) without a free allowance; ``other_length_min_diff_tokens=200`` restores the
  original.
* attribution: the memory type retrieved most often for the session's questions, *among the memories
  this session wrote*, is dominant; that agent's GRPO advantage is multiplied by alpha = 4
  (:func:`attribution_weights`); the core agent is never boosted (core memory is always in context,
  never retrieved). Counting the memories of earlier sessions too boosted an agent that wrote nothing
  (13 of 42 sessions with a silent semantic agent).

Fixed bugs of the original: (1) it measured the expert's length in characters and the model's in
characters / 4 and compared them; both must be in the same unit (tokens, see :meth:`ADRPOConfig.tokens`).
(2) On a reward-server error it paid ``min(0.8, 0.05 * number_of_operations)``: a policy learns to emit
many operations whenever the server is flaky. Here a server or judge error is a failure outcome with no
value (:func:`task_reward` with ``n_failed > 0``, or :meth:`RewardOutcome.failed`). (3) When the expert
wrote nothing it skipped the penalty, letting the policy write unbounded memory for sessions the expert
skipped; here rho = (model + 50) / 50 grows with every token written (LP = 1 from 50 tokens). (4) It
skipped the penalty below a 200-token gap (see above).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields

from memrl.errors import ConfigError
from memrl.rewards.outcome import RewardOutcome

__all__ = [
    "ADRPOConfig",
    "INVALID",
    "RETRIEVABLE_TYPES",
    "adrpo_agent_reward",
    "adrpo_reward",
    "attribution_weights",
    "core_length_penalty",
    "dominant_type",
    "relative_length_penalty",
    "task_reward",
]

#: Memory types that retrieval can return, in tie-break order for :func:`dominant_type`.
RETRIEVABLE_TYPES: tuple[str, ...] = ("episodic", "semantic", "procedural")


@dataclass(frozen=True)
class ADRPOConfig:
    """ADRPO reward constants (defaults are the paper's / original code's)."""

    expert_length_penalty_weight: float = field(
        default=0.8, metadata={"help": "lambda: r = task * (1 - lambda * LP). 0 disables the penalty."}
    )
    core_length_start_penalty: float = field(
        default=150.0, metadata={"help": "theta_min (tokens): core writes up to this length are free."}
    )
    core_length_max_penalty: float = field(
        default=400.0, metadata={"help": "theta_max (tokens): core writes this long or longer get LP = 1."}
    )
    other_length_upper_tolerance: float = field(
        default=1.3, metadata={"help": "gamma_u: no penalty while model/expert length <= this ratio."}
    )
    other_length_lower_tolerance: float = field(
        default=0.5, metadata={"help": "gamma_l: no penalty while model/expert length >= this ratio."}
    )
    other_length_upper_max_ratio: float = field(
        default=2.0, metadata={"help": "Ratio at which the above-tolerance penalty reaches 1."}
    )
    other_length_lower_min_ratio: float = field(
        default=0.2, metadata={"help": "Ratio at which the below-tolerance penalty reaches 1."}
    )
    other_length_min_diff_tokens: float = field(
        default=0.0,
        metadata={
            "help": "No ratio penalty when |model - expert| is below this many tokens (the original: 200, "
            "a free allowance a verbatim dump exploits)."
        },
    )
    length_smoothing_tokens: float = field(
        default=50.0,
        metadata={"help": "s in rho = (model + s) / (expert + s): no explosive ratio on a few tokens."},
    )
    attribution_boost_factor: float = field(
        default=4.0, metadata={"help": "alpha: advantage multiplier of the dominant memory type's agent."}
    )
    n_questions: int = field(default=5, metadata={"help": "Synthetic QA pairs asked per session."})
    chars_per_token: float = field(
        default=4.0, metadata={"help": "Characters per token when only a character count is known."}
    )

    def __post_init__(self) -> None:
        if not 0.0 <= self.expert_length_penalty_weight <= 1.0:
            raise ConfigError(
                f"expert_length_penalty_weight={self.expert_length_penalty_weight} must be in [0, 1] "
                "(above 1 a correct but long answer would get a negative reward)"
            )
        if not 0.0 <= self.core_length_start_penalty < self.core_length_max_penalty:
            raise ConfigError(
                "need 0 <= core_length_start_penalty < core_length_max_penalty, got "
                f"{self.core_length_start_penalty} and {self.core_length_max_penalty}"
            )
        if not (
            0.0
            <= self.other_length_lower_min_ratio
            < self.other_length_lower_tolerance
            <= self.other_length_upper_tolerance
            < self.other_length_upper_max_ratio
        ):
            raise ConfigError(
                "need 0 <= other_length_lower_min_ratio < other_length_lower_tolerance <= "
                "other_length_upper_tolerance < other_length_upper_max_ratio"
            )
        if self.other_length_min_diff_tokens < 0 or self.length_smoothing_tokens < 0:
            raise ConfigError("other_length_min_diff_tokens and length_smoothing_tokens must be >= 0")
        if self.attribution_boost_factor <= 0:
            raise ConfigError("attribution_boost_factor must be > 0 (1 disables attribution)")
        if self.n_questions < 1:
            raise ConfigError("n_questions must be >= 1")
        if self.chars_per_token <= 0:
            raise ConfigError("chars_per_token must be > 0")

    def tokens(self, chars: float) -> float:
        """Approximate token count of ``chars`` characters (use it for BOTH model and expert lengths)."""
        return chars / self.chars_per_token

    @classmethod
    def help(cls) -> dict[str, str]:
        """Field name -> help text (for CLIs and docs)."""
        return {f.name: f.metadata.get("help", "") for f in fields(cls)}


_DEFAULT = ADRPOConfig()
#: The reward of an agent whose reply did not parse: the floor of the task's range (-1 to 1).
INVALID = -1.0


def task_reward(
    n_correct: int,
    n_questions: int = 5,
    parsed: bool = True,
    *,
    n_failed: int = 0,
    chance: float = 0.0,
) -> RewardOutcome:
    """task = (n_correct - chance) / n_questions for one agent, in [-1, 1].

    ``chance`` is how many of the session's questions the memory would answer without the session: the
    decoys it answered (questions whose answers the session does not state), scaled to the number of the
    session's questions (:func:`memrl.agents.membuilder.adrpo.decoy_questions`). Without it, memory that
    states likely answers regardless of the session (the most frequent training answers appended to core
    memory) is paid whenever a guess happens to be right. The difference is *not* clipped at 0: a guess
    answers a decoy as often as one of the session's questions, so the signed task pays it nothing in
    expectation, where ``max(0, ...)`` kept the sessions it won and forgave the ones it lost (measured: +0.003
    for five guesses in core over every training session, against -0.002 signed; docs/rewards.md).
    ``parsed=False`` (the agent's JSON did not parse) gives the floor of that range, -1.0, flagged
    ``invalid``: a broken reply is never worth more than a valid one. ``n_failed > 0`` (judge or server
    errors on some questions, decoys included) gives a failure with no value: an unanswered judgement is
    neither right nor wrong.
    """
    if n_questions < 1:
        return RewardOutcome.failed("membuilder: no questions to score the session with")
    if not 0 <= n_failed <= n_questions:
        raise ValueError(f"n_failed={n_failed} must be in [0, {n_questions}]")
    if n_failed:
        return RewardOutcome.failed(f"membuilder: {n_failed} of {n_questions} judgements failed")
    if not 0 <= n_correct <= n_questions:
        raise ValueError(f"n_correct={n_correct} must be in [0, {n_questions}]")
    if not 0.0 <= chance <= n_questions:
        raise ValueError(f"chance={chance} must be in [0, {n_questions}]")
    if not parsed:
        return RewardOutcome.ok(INVALID, invalid="agent output is not valid JSON", task=INVALID)
    task = (n_correct - chance) / n_questions
    return RewardOutcome.ok(task, task=task, correct=float(n_correct), chance=float(chance))


def core_length_penalty(
    chars: float, config: ADRPOConfig = _DEFAULT, *, expert_chars: float | None = None
) -> float:
    """LP of the core agent from the number of characters it wrote (t = chars / 4); with the expert's
    core write of the session (``expert_chars``), the larger of that and the relative penalty."""
    if chars < 0:
        raise ValueError(f"chars must be >= 0, got {chars}")
    t = config.tokens(chars)
    lo, hi = config.core_length_start_penalty, config.core_length_max_penalty
    absolute = 0.0 if t <= lo else 1.0 if t >= hi else (t - lo) / (hi - lo)
    if expert_chars is None:
        return absolute
    return max(absolute, relative_length_penalty(t, config.tokens(expert_chars), config))


def relative_length_penalty(
    model_tokens: float, expert_tokens: float, config: ADRPOConfig = _DEFAULT
) -> float:
    """LP of an episodic/semantic/procedural agent; both lengths in tokens (the SAME unit), compared as
    rho = (model + s) / (expert + s) with s = ``config.length_smoothing_tokens``.

    Convert character counts with :meth:`ADRPOConfig.tokens` on both sides.
    """
    if model_tokens < 0 or expert_tokens < 0:
        raise ValueError(f"lengths must be >= 0, got model={model_tokens}, expert={expert_tokens}")
    if abs(model_tokens - expert_tokens) < config.other_length_min_diff_tokens:
        return 0.0
    s = config.length_smoothing_tokens
    rho = (model_tokens + s) / (expert_tokens + s) if expert_tokens + s > 0 else math.inf
    lo, hi = config.other_length_lower_tolerance, config.other_length_upper_tolerance
    if lo <= rho <= hi:
        return 0.0
    if rho > hi:
        return min(1.0, (rho - hi) / (config.other_length_upper_max_ratio - hi))
    return min(1.0, (lo - rho) / (lo - config.other_length_lower_min_ratio))


def adrpo_reward(task: float, lp: float, weight: float = 0.8) -> float:
    """r = task * (1 - weight * LP) when task > 0; the task reward unchanged otherwise."""
    if not 0.0 <= lp <= 1.0:
        raise ValueError(f"length penalty must be in [0, 1], got {lp}")
    if task <= 0:
        return task
    return task * (1.0 - weight * lp)


def adrpo_agent_reward(task: RewardOutcome, lp: float, config: ADRPOConfig = _DEFAULT) -> RewardOutcome:
    """Combine a :func:`task_reward` outcome with a length penalty; failures and invalid outputs pass through."""
    if task.value is None or task.invalid is not None:
        return task
    value = adrpo_reward(task.value, lp, config.expert_length_penalty_weight)
    applied = lp if task.value > 0 else 0.0
    return RewardOutcome.ok(value, **{**task.metrics, "length_penalty": applied})


def _type_name(t: object) -> str:
    return str(getattr(t, "value", t)).strip().lower()


def dominant_type(retrieved_types_per_question: Iterable[Iterable[object]]) -> str | None:
    """The memory type retrieved most often over all of a session's questions, or ``None`` if none was.

    Each element lists the types (strings or ``MemoryType``) of the memories retrieved for one question.
    Only episodic/semantic/procedural count. Ties go to the first in ``RETRIEVABLE_TYPES`` order
    (episodic, semantic, procedural), as in the original.
    """
    counts: Counter[str] = Counter()
    for types in retrieved_types_per_question:
        counts.update(name for name in map(_type_name, types) if name in RETRIEVABLE_TYPES)
    if not counts:
        return None
    best = max(counts.values())
    return next(t for t in RETRIEVABLE_TYPES if counts[t] == best)


def attribution_weights(
    agent_types: Sequence[object], dominant: str | None, alpha: float = _DEFAULT.attribution_boost_factor
) -> list[float]:
    """Per-agent advantage multipliers: ``alpha`` for the dominant type's agent, 1.0 for all others."""
    target = _type_name(dominant) if dominant is not None else None
    if target is not None and target not in RETRIEVABLE_TYPES:
        raise ValueError(f"dominant type must be one of {RETRIEVABLE_TYPES} or None, got {dominant!r}")
    return [alpha if target is not None and _type_name(t) == target else 1.0 for t in agent_types]
