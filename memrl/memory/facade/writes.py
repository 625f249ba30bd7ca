"""``AsyncMemory.remember`` / ``maintain`` / ``read``: the agents on the memory's write path, as jobs.

The memory layer does not run agents (they live above it); it hands each request to the :class:`JobWriter`
it was given, usually :class:`memrl.agents.jobs.JobRunner`::

    from memrl import AsyncMemory
    from memrl.agents.jobs import job_writer

    m = AsyncMemory("memories.db", writer=job_writer("http://localhost:8000/v1"))  # a capable model; job_writer():
                                                                # none, remember stores the turns (raw)
    job = await m.remember([{"role": "user", "content": "I moved to Lisbon"}], user_id="alice")
    job.status, job.events                                      # "succeeded", [{"event": "added", ...}]
    await m.undo_job(job.id)                                    # exactly that job's writes

Each method returns the :class:`~memrl.memory.jobs.table.Job` (finished, with ``wait=True``, the default; queued
with ``wait=False``). A job runs on a clone of its namespace and is applied as one history batch (see
:mod:`memrl.memory.jobs.changes`); a failed job (``status == "failed"``, ``error`` says why) changed nothing.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memrl.errors import ConfigError, ValidationError
from memrl.memory.jobs.table import Job, JobTable, JobWriter, check_messages

_NO_WRITER = (
    "this memory has no job writer, so it cannot run agents ({what}). Pass one: "
    "AsyncMemory(path, writer=job_writer(...)) with `from memrl.agents.jobs import job_writer` "
    "(the spec: an OpenAI-compatible URL such as 'http://localhost:8000/v1', a provider such as 'openai', "
    "or an LLM instance; job_writer() with none remembers with builder='raw' only; 'local', the offline 135M "
    "model, is an opt-in that writes mostly junk)"
)
BUILDERS = ("membuilder", "raw")


class JobMethods:
    """The job methods of :class:`~memrl.memory.facade.memory.AsyncMemory` (a mixin: it supplies ``ns``, ``store``
    and ``writer``)."""

    writer: JobWriter | None
    store: Any

    def ns(self, namespace: str | None = None, user_id: str | None = None) -> str:  # pragma: no cover
        raise NotImplementedError

    def _job_writer(self, what: str) -> JobWriter:
        if self.writer is None:
            raise ConfigError(_NO_WRITER.format(what=what))
        return self.writer

    async def _run_job(
        self,
        ns: str,
        kind: str,
        request: dict[str, Any],
        *,
        dry_run: bool,
        wait: bool,
        timeout: float | None,
        idempotency_key: str | None,
    ) -> Job:
        writer = self._job_writer(kind)
        request = {k: v for k, v in request.items() if v is not None}
        job, _ = await writer.submit(ns, kind, request, idempotency_key=idempotency_key, dry_run=dry_run)
        return await writer.wait(job.id, timeout) if wait else job

    async def remember(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        namespace: str | None = None,
        user_id: str | None = None,
        session_time: str | datetime | None = None,
        builder: str | None = None,
        dry_run: bool = False,
        wait: bool = True,
        timeout: float | None = None,
        idempotency_key: str | None = None,
    ) -> Job:
        """Build memory from a conversation (``messages``: ``{"role", "content", "speaker"?, "timestamp"?}``)
        as one session: MemBuilder writes core, episodic, semantic and procedural memories (the default when
        the writer has a model), or ``builder="raw"`` stores the turns, no LLM (the default without one).
        Every write an agent makes passes the write check first (:mod:`memrl.agents.jobs.write_check`). ``dry_run``: the events only, nothing applied. ``idempotency_key``: a
        retry with the same key returns the first job instead of building twice."""
        if builder is not None and builder not in BUILDERS:
            raise ValidationError(
                f"builder must be one of {', '.join(BUILDERS)}, got {builder!r}", field="builder"
            )
        when = session_time.isoformat() if isinstance(session_time, datetime) else session_time
        request = {"messages": check_messages(messages), "session_time": when, "agent": builder}
        return await self._run_job(self.ns(namespace, user_id), "remember", request, dry_run=dry_run, wait=wait,
                                   timeout=timeout, idempotency_key=idempotency_key)  # fmt: skip

    async def maintain(
        self,
        *,
        namespace: str | None = None,
        user_id: str | None = None,
        max_tool_calls: int = 30,
        question: str | None = None,
        allow_mass_delete: bool = False,
        dry_run: bool = False,
        wait: bool = True,
        timeout: float | None = None,
        idempotency_key: str | None = None,
    ) -> Job:
        """One MemUpdate episode over the namespace (search, add, update, delete, merge, split), at most
        ``max_tool_calls`` tool calls; ``question`` focuses it. It may delete at most the writer's share of
        the namespace unless ``allow_mass_delete``."""
        if not 1 <= int(max_tool_calls) <= 200:
            raise ValidationError("max_tool_calls must be between 1 and 200", field="max_tool_calls")
        request = {"max_tool_calls": int(max_tool_calls), "question": question,
                   "allow_mass_delete": bool(allow_mass_delete) or None}  # fmt: skip
        return await self._run_job(self.ns(namespace, user_id), "maintain", request, dry_run=dry_run, wait=wait,
                                   timeout=timeout, idempotency_key=idempotency_key)  # fmt: skip

    async def memorize(
        self,
        document: str,
        *,
        namespace: str | None = None,
        user_id: str | None = None,
        question: str | None = None,
        title: str | None = None,
        dry_run: bool = False,
        wait: bool = True,
        timeout: float | None = None,
        idempotency_key: str | None = None,
    ) -> Job:
        """A write job: MemAgent reads ``document`` chunk by chunk and stores its final memory; with a
        ``question`` the job's ``result["answer"]`` holds its answer. (It was called ``read``, which is
        still accepted, deprecated: it writes memory, it does not read it.)"""
        if not isinstance(document, str) or not document.strip():
            raise ValidationError("document must be non-empty text", field="document")
        request = {"document": document, "question": question, "title": title}
        return await self._run_job(self.ns(namespace, user_id), "read", request, dry_run=dry_run, wait=wait,
                                   timeout=timeout, idempotency_key=idempotency_key)  # fmt: skip

    async def read(self, document: str, **kwargs: Any) -> Job:
        """Deprecated name of :meth:`memorize` (a write job, not a read)."""
        warnings.warn(
            "AsyncMemory.read(document) is now memorize(document)", DeprecationWarning, stacklevel=2
        )
        return await self.memorize(document, **kwargs)

    async def job(self, job_id: str, *, wait: bool = False, timeout: float | None = None) -> Job:
        """A job by id (waiting for it to finish with ``wait``)."""
        writer = self._job_writer("job")
        return await writer.wait(job_id, timeout) if wait else writer.get(job_id)

    async def jobs(
        self, *, namespace: str | None = None, user_id: str | None = None, limit: int = 100
    ) -> list[Job]:
        """A namespace's jobs, newest first (read from the store: no writer needed)."""
        return JobTable(self.store).list(self.ns(namespace, user_id), limit=limit)

    async def cancel_job(self, job_id: str) -> Job:
        """Cancel a queued or running job: nothing it did is applied."""
        return await self._job_writer("cancel_job").cancel(job_id)

    async def undo_job(self, job_id: str, *, actor: str | None = None) -> Job:
        """Revert every write of a succeeded job (refused, naming the items, if a later change touched them)."""
        return await self._job_writer("undo_job").undo(job_id, actor=actor)
