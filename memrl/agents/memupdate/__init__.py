"""MemUpdate: an agent edits an existing namespace with six tools so future questions are answered better
(``from memrl.agents.memupdate import run_episode, update_memory``).

- ``agent``: :class:`MemUpdateAgent`, one episode of tool calls, and the functions around it
  (:func:`init_from_observations`, :func:`run_episode`, :func:`update_memory`, ...);
- ``config``: :class:`MemUpdateConfig`, :class:`UpdateResult` and the job description the model reads.

Before this package ``memrl.agents.memupdate`` was a module beside ``memrl.agents.memupdate_config``; that
path still imports, with a ``DeprecationWarning`` (:mod:`memrl.agents._moved`).
"""

from memrl.agents.memupdate.agent import (
    SYSTEM_PROMPT,
    MemUpdateAgent,
    MemUpdateConfig,
    UpdateResult,
    init_from_observations,
    probe_questions,
    run_episode,
    state_before,
    update_memory,
)

__all__ = [
    "SYSTEM_PROMPT", "MemUpdateAgent", "MemUpdateConfig", "UpdateResult", "init_from_observations", "probe_questions",
    "run_episode", "state_before", "update_memory",
]  # fmt: skip
