"""Who hears of a job runner's jobs: each job runs in an ``invoke_agent`` span, and its listeners (a server's
metrics and job log, :mod:`memrl.server.observe`) are told of each model call it makes and of how it ended.

    runner.watch.add(listener)      # listener.llm_call(job, call); listener.job_ended(job, outcome, seconds)

A job's outcome is ``succeeded``, ``failed`` or ``cancelled``: what the runner wrote in the job's row
(:meth:`JobWatch.note`, from the runner's own ``_fail``), else what ended it (an exception: failed; a
cancellation: cancelled).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any, Protocol

from memrl import telemetry
from memrl.memory.jobs import Job

#: The agent behind each kind of job (``remember`` without a model: raw).
AGENTS = {"remember": "membuilder", "maintain": "memupdate", "read": "memagent"}


class JobListener(Protocol):
    def llm_call(self, job: Job, call: telemetry.LLMCall) -> None: ...

    def job_ended(self, job: Job, outcome: str, seconds: float) -> None: ...


class JobWatch:
    """A runner's listeners, and the outcome each running job's row was given (see the module docstring)."""

    def __init__(self) -> None:
        self.listeners: list[JobListener] = []
        self._ended: dict[str, str | None] = {}  # running job -> the status its row was given, if any

    def add(self, listener: JobListener) -> None:
        self.listeners.append(listener)

    def note(self, job_id: str, status: str) -> None:
        """The runner closed ``job_id`` with ``status`` (its row says so); only a running job's is kept."""
        if job_id in self._ended:
            self._ended[job_id] = status

    @contextlib.contextmanager
    def running(self, job: Job, has_model: bool) -> Iterator[Any]:
        """Run ``job`` inside: its span, its model calls told to the listeners, and its end."""
        agent = AGENTS.get(job.kind, job.kind)
        if job.kind == "remember" and (job.request.get("agent") == "raw" or not has_model):
            agent = "raw"
        attrs = {telemetry.OPERATION: "invoke_agent", telemetry.AGENT_NAME: agent, telemetry.STORE_ID: job.namespace,
                 "memrl.job.id": job.id, "memrl.job.kind": job.kind, "memrl.job.dry_run": job.dry_run}  # fmt: skip
        listeners = list(self.listeners)

        def heard(call: telemetry.LLMCall) -> None:
            for listener in listeners:
                listener.llm_call(job, call)

        token = telemetry.LLM_CALLS.set(heard if listeners else None)
        self._ended[job.id] = None
        start, outcome = time.monotonic(), "failed"
        try:
            with telemetry.span(f"invoke_agent {agent}", attrs) as span:
                try:
                    yield span
                    outcome = self._ended.get(job.id) or "succeeded"
                except asyncio.CancelledError:
                    outcome = "cancelled"
                    raise
                finally:
                    span.set_attribute("memrl.job.outcome", outcome)
        finally:
            self._ended.pop(job.id, None)
            telemetry.LLM_CALLS.reset(token)
            for listener in listeners:
                listener.job_ended(job, outcome, time.monotonic() - start)
