"""The job writer a memory or a server is given: :func:`job_writer` builds a :class:`JobRunner` from the
``--llm`` spec of ``memrl serve memory`` / ``memrl remember`` (:func:`llm_from_spec`)::

    memory = AsyncMemory("m.db", writer=job_writer("http://localhost:8000/v1", "my-model"))
"""

from __future__ import annotations

import logging

from memrl.agents.jobs.config import JobConfig
from memrl.agents.jobs.runner import JobRunner
from memrl.llm.base import LLM

__all__ = ["LOCAL_WARNING", "describe_writer", "job_writer", "llm_from_spec"]

log = logging.getLogger("memrl.agents.jobs")  # the name it had before the package

#: The one-line warning of an explicit ``local`` (the offline 135M model) behind the agents.
LOCAL_WARNING = (
    "warning: --llm local is the offline 135M model: most of what it writes is junk (the write check refuses "
    "it); use a capable model (an OpenAI-compatible URL, openai) for remember/maintain/read"
)


def llm_from_spec(spec: str | LLM | None, model: str | None = None) -> LLM | None:
    """The LLM behind the agents, as ``memrl serve memory --llm`` names it: ``none`` (or None: no model, so
    remember stores the turns with the ``raw`` agent), an OpenAI-compatible base URL (vLLM/SGLang serving a
    checkpoint of ``memrl train`` or verl; ``model`` is the served name, a LoRA's included), a provider name
    (``openai``, ...; ``local``, the offline 135M model, is an opt-in with a warning: it writes mostly junk),
    or an :class:`LLM` already built."""
    from memrl.llm import create_llm

    if spec is None or spec in ("none", ""):
        return None
    if spec == "local":
        log.warning(LOCAL_WARNING)
    if not isinstance(spec, str):
        return spec
    if spec.startswith(("http://", "https://")):
        return create_llm("openai", model or "default", base_url=spec)
    return create_llm(spec, model)


def job_writer(
    llm: str | LLM | None = None, model: str | None = None, config: JobConfig | None = None
) -> JobRunner:
    """A job writer for ``AsyncMemory(..., writer=job_writer(...))`` / ``Memory``: a :class:`JobRunner`
    whose agents use ``llm`` (see :func:`llm_from_spec`). Without one (the default) it has no model:
    ``remember`` stores the turns as they were said (the ``raw`` agent), and maintain/read are refused."""
    return JobRunner(None, llm_from_spec(llm, model), config)


def describe_writer(runner: JobRunner) -> str:
    """What a server's start banner says of its agent jobs."""
    if runner.llm is None:
        return (
            "agent jobs: remember stores the turns as said (agent=raw): no capable model configured "
            "(--llm URL|openai|local)"
        )
    return f"agent jobs: remember/maintain/read with {getattr(runner.llm, 'name', type(runner.llm).__name__)}"
