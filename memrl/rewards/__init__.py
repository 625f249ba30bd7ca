"""memrl.rewards: small pure reward functions (MemUpdate, MemBuilder/ADRPO, MemAgent) and a rubric to combine them.

Every function that can fail returns a :class:`RewardOutcome`: a value, or the reason there is none.
"""

from memrl.rewards.answer import ANSWER_REWARDS, answer_f1, answer_reward, short_sub_em
from memrl.rewards.memagent import memagent_eval, memagent_reward, value_set_reward
from memrl.rewards.membuilder import (
    ADRPOConfig,
    adrpo_agent_reward,
    adrpo_reward,
    attribution_weights,
    core_length_penalty,
    dominant_type,
    relative_length_penalty,
    task_reward,
)
from memrl.rewards.memupdate import (
    answer_coverage,
    context_window,
    efficiency_factor,
    memupdate_reward,
    score_memupdate,
)
from memrl.rewards.outcome import RewardOutcome
from memrl.rewards.rubric import Rubric, RubricTerm

__all__ = [
    "ANSWER_REWARDS",
    "ADRPOConfig",
    "RewardOutcome",
    "Rubric",
    "RubricTerm",
    "adrpo_agent_reward",
    "adrpo_reward",
    "answer_f1",
    "answer_reward",
    "answer_coverage",
    "attribution_weights",
    "context_window",
    "core_length_penalty",
    "dominant_type",
    "efficiency_factor",
    "memagent_eval",
    "memagent_reward",
    "memupdate_reward",
    "relative_length_penalty",
    "score_memupdate",
    "short_sub_em",
    "task_reward",
    "value_set_reward",
]
