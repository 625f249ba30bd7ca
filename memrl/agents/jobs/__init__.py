"""Agent jobs: remember / maintain / read requests run in the background on a memory, one writer per
namespace (``from memrl.agents.jobs import JobRunner, job_writer``)::

    memory = AsyncMemory("m.db", writer=job_writer("openai"))
    job = await memory.remember([{"role": "user", "content": "I moved to Lisbon"}], user_id="alice")

- ``runner``: :class:`JobRunner`, how a job is queued, claimed, run on a scratch clone, checked and committed;
- ``writer``: :func:`job_writer` and :func:`llm_from_spec`, a runner from an ``--llm`` spec;
- ``kinds``: what each kind of job runs (MemBuilder, the ``raw`` builder, MemUpdate, MemAgent);
- ``write_check``: the rules that refuse a junk write before it is committed;
- ``config`` (:class:`JobConfig`), ``queue`` (per-client caps), ``work`` (the store threads and their patience),
  ``owners`` (which process runs a job, heartbeats), ``progress`` (model calls counted), ``watch`` (spans and
  listeners).

Before this package these were flat modules (``memrl.agents.job_queue``, ``memrl.agents.write_check``, ...);
those paths still import, with a ``DeprecationWarning`` (:mod:`memrl.agents._moved`).

Names are imported on first use, so a module of the package (``python -m memrl.agents.jobs.write_check``)
runs without the runner and the agents behind it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memrl import _moved

if TYPE_CHECKING:  # the same names as _EXPORTS
    from memrl.agents.jobs.config import JobConfig
    from memrl.agents.jobs.runner import JobRunner
    from memrl.agents.jobs.writer import LOCAL_WARNING, describe_writer, job_writer, llm_from_spec

#: name -> the module of the package that defines it.
_EXPORTS = {"JobConfig": "config", "JobRunner": "runner", "LOCAL_WARNING": "writer", "describe_writer": "writer",
            "job_writer": "writer", "llm_from_spec": "writer"}  # fmt: skip

__all__ = ["LOCAL_WARNING", "JobConfig", "JobRunner", "describe_writer", "job_writer", "llm_from_spec"]


__getattr__ = _moved.exports(__name__, _EXPORTS)
