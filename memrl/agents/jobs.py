"""Agent jobs: remember / maintain / read requests run in the background, one writer per namespace.

The service (REST, MCP), the CLI and ``AsyncMemory.remember`` hand jobs to a :class:`JobRunner`::

    runner = JobRunner(memory, llm)                        # llm: the server's choice; None = only raw remember
    memory = AsyncMemory("m.db", writer=job_writer())      # the same, given to a memory (its JobWriter)
    await runner.start()                                   # after a restart: interrupted jobs failed, queue resumed
    job, created = await runner.submit("alice", "remember", {"messages": [...]}, idempotency_key="k1")
    job = await runner.wait(job.id, timeout=60)            # job.status, job.result["events"]
    await runner.undo(job.id)                              # exactly that job's writes; 409 if touched later

How a job runs (see :mod:`memrl.memory.jobs.changes`): its namespace is cloned into a scratch namespace, the
agent (:mod:`memrl.agents.job_kinds`) works on the clone, the differences become the job's events, and they
are written into the namespace in one transaction and one history batch, with the job's row. So a failed,
cancelled or killed job left nothing in its namespace, a dry run is the job without that last step, and
undo reverts one batch. Before that step every change an agent wrote goes through the write check
(:mod:`memrl.agents.write_check`): junk (repetition loops, text from nowhere) is refused, shown as a
``refused`` event and counted in ``stats["refused"]``, never stored. Jobs of one namespace run one at a time, in order (a lock per namespace in a
process, and an atomic claim in the store across processes: several server processes may share one store);
jobs of different namespaces run at once. Every job is a row of the store's ``jobs`` table
(:mod:`memrl.memory.jobs.table`) naming the process that runs it (``owner``: host, pid, a random id) and when that
process last said it was alive (``heartbeat_at``, every ``heartbeat_every`` seconds). A job whose process is
dead (on this host: its pid is gone or, in this process, its runner closed; on another host: no heartbeat for
``stale_after`` seconds) is marked failed and its scratch clone dropped, by :meth:`JobRunner.start` after a
restart or by any live runner's heartbeat; queued jobs run again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any

from memrl.agents.job_kinds import KINDS, Outcome, run_kind
from memrl.agents.job_progress import Progress
from memrl.agents.write_check import check_events, job_source
from memrl.config import option
from memrl.errors import ConfigError, MemrlError, NotFoundError, ValidationError
from memrl.llm.base import LLM
from memrl.memory import AsyncMemory
from memrl.memory.index import cache_scope
from memrl.memory.jobs import (
    Job,
    JobTable,
    check_deletes,
    check_messages,
    commit,
    diff,
    scratch_name,
    start_scratch,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobConfig:
    """How the runner treats jobs."""

    max_delete_share: float = option(
        0.5, "a job may delete at most this share of its namespace's memories unless allow_mass_delete"
    )
    keep_finished: int = option(1000, "finished jobs whose completion events this process keeps for waiters")
    progress_every: float = option(0.5, "seconds between two writes of a running job's progress")
    heartbeat_every: float = option(5.0, "seconds between two heartbeats of this process's running jobs")
    stale_after: float = option(
        120.0, "a job of another host with no heartbeat for this long is taken as dead (failed, not applied)"
    )
    claim_poll: float = option(
        0.2, "seconds between two tries to start a job whose namespace is busy elsewhere"
    )

    def __post_init__(self) -> None:
        if not 0 <= self.max_delete_share <= 1:
            raise ValidationError("max_delete_share must be between 0 and 1", field="max_delete_share")
        if not 0 < self.heartbeat_every < self.stale_after:
            raise ValidationError(
                "heartbeat_every must be > 0 and below stale_after", field="heartbeat_every"
            )


#: Owners of the runners open in this process (a job of this pid whose owner is not here was left by a
#: runner that closed or crashed).
_LIVE_OWNERS: set[str] = set()
_HOST = socket.gethostname()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


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


class JobRunner:
    """Queues and runs agent jobs on one :class:`AsyncMemory` (see the module docstring); a
    :class:`~memrl.memory.jobs.table.JobWriter`. Built without a memory, it runs on the one it is given to
    (``AsyncMemory(..., writer=runner)`` calls :meth:`attach`)."""

    def __init__(
        self, memory: AsyncMemory | None = None, llm: LLM | None = None, config: JobConfig | None = None
    ) -> None:
        self.memory: AsyncMemory = None  # type: ignore[assignment]  # set by attach
        self.table: JobTable = None  # type: ignore[assignment]
        self.llm = llm
        self.config = config or JobConfig()
        self.owner = f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._heartbeat: asyncio.Task | None = None
        if memory is not None:
            self.attach(memory)
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: dict[str, asyncio.Task] = {}
        self._done: dict[str, asyncio.Event] = {}
        self._started = False

    # ------------------------------------------------------------------ life cycle
    def attach(self, memory: AsyncMemory) -> None:
        """Run jobs on ``memory`` (one memory per runner)."""
        if self.memory is not None and self.memory is not memory:
            raise ConfigError("this JobRunner already runs the jobs of another memory; make one per memory")
        self.memory, self.table = memory, JobTable(memory.store)

    async def start(self) -> list[str]:
        """Recover after a restart (once): jobs left running by a dead process failed (their clones dropped,
        so their partial writes never reach a namespace), queued jobs run again (a job another live process
        runs or claims first is left to it). Returns the ids of the failed ones."""
        if self.memory is None:
            raise ConfigError(
                "this JobRunner has no memory: give it to one, AsyncMemory(path, writer=runner)"
            )
        if self._started:
            return []
        self._started = True
        _LIVE_OWNERS.add(self.owner)
        failed = self._reap()
        for job in self.table.unfinished():
            if job.status == "queued":
                self._schedule(job)
        self._heartbeat = asyncio.get_running_loop().create_task(self._beat_forever(), name="job-heartbeat")
        return failed

    async def close(self) -> None:
        """Stop running jobs: they end cancelled, nothing they did applied."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
        tasks = list(self._tasks.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        _LIVE_OWNERS.discard(self.owner)

    # ------------------------------------------------------------------ processes sharing a store
    def _dead(self, job: Job) -> bool:
        """Whether the process running ``job`` is gone (see the module docstring)."""
        if job.owner is None:  # a row from before owners were recorded
            return True
        host, _, rest = job.owner.partition(":")
        pid = rest.partition(":")[0]
        silent = job.heartbeat_at is None or job.heartbeat_at < time.time() - self.config.stale_after
        if host == _HOST and pid.isdigit():
            if int(pid) == os.getpid():
                return job.owner not in _LIVE_OWNERS
            # its pid tells (a long model call may delay a heartbeat); a pid reused by another program
            # after a crash is caught by a silence ten times the limit
            long_silent = (
                job.heartbeat_at is None or job.heartbeat_at < time.time() - 10 * self.config.stale_after
            )
            return not _pid_alive(int(pid)) or long_silent
        return silent

    def _reap(self) -> list[str]:
        failed = self.table.reap(self._dead)
        for job in failed:
            self._drop(job)
        return [j.id for j in failed]

    async def _beat_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_every)
            try:
                for job_id in self.table.beat(self.owner):  # finished elsewhere (cancelled): stop it here
                    task = self._tasks.get(job_id)
                    if task is not None:
                        task.cancel()
                self._reap()
            except MemrlError:  # the store is busy or gone for a moment: the next beat tries again
                log.warning("job heartbeat failed", exc_info=True)

    # ------------------------------------------------------------------ requests
    async def submit(
        self,
        namespace: str,
        kind: str,
        request: dict[str, Any],
        *,
        idempotency_key: str | None = None,
        dry_run: bool = False,
    ) -> tuple[Job, bool]:
        """Queue a job; returns it and whether it is new (False: the idempotency key named an earlier one)."""
        await self.start()
        if kind not in KINDS:
            raise ValidationError(f"unknown job kind {kind!r}; one of {', '.join(KINDS)}", field="kind")
        if kind == "remember":  # one format from every door: OpenAI's name and text parts become memrl's
            request = {**request, "messages": check_messages(request.get("messages"))}
        job, created = self.table.create(namespace, kind, request, idempotency_key=idempotency_key,
                                         dry_run=dry_run)  # fmt: skip
        if created:
            self._schedule(job)
        return job, created

    def get(self, job_id: str) -> Job:
        return self.table.get(job_id)

    async def wait(self, job_id: str, timeout: float | None = None) -> Job:
        """The job once finished, or as it is after ``timeout`` seconds."""
        job = self.table.get(job_id)
        event = self._done.get(job_id)
        if not job.finished and event is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(event.wait(), timeout)
        return self.table.get(job_id)

    async def cancel(self, job_id: str) -> Job:
        """Cancel a queued or running job (nothing it did is applied); a finished job is returned as it is."""
        job = self.table.get(job_id)
        task = self._tasks.get(job_id)
        if not job.finished and task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        elif not job.finished:  # queued or run by another process: its heartbeat sees this and stops it,
            # and its commit is refused (JobTable.require_running)
            self.table.cancel_unfinished(job)
        return self.table.get(job_id)

    async def undo(self, job_id: str, *, actor: str | None = None) -> Job:
        """Revert every write of a succeeded job, as one change (refused with 409 naming the items a later
        change touched; 404 when the job wrote nothing or was undone already)."""
        job = self.table.get(job_id)
        if job.batch is None or job.undone:
            state = "was undone already" if job.undone else f"changed nothing ({job.status})"
            raise NotFoundError(f"nothing to undo: job {job_id!r} {state}")
        lock = self._locks.setdefault(job.namespace, asyncio.Lock())
        async with lock:  # not in the middle of another job of the namespace
            self.table.undo(job, actor=actor or f"undo:job:{job_id}")
        return self.table.get(job_id)

    # ------------------------------------------------------------------ running
    def _schedule(self, job: Job) -> None:
        self._done[job.id] = asyncio.Event()
        self._tasks[job.id] = asyncio.get_running_loop().create_task(self._run(job), name=f"job-{job.id}")
        if len(self._done) > self.config.keep_finished:
            for jid in [j for j in self._done if j not in self._tasks][: len(self._done) // 2]:
                self._done.pop(jid, None)

    def _drop(self, job: Job) -> None:
        scratch = job.scratch or scratch_name(job.id)
        self.memory.store.drop_namespace(scratch)
        self.memory.index.forget(scratch)

    def _fail(self, job: Job, status: str, error: str, result: dict[str, Any] | None = None) -> None:
        if not self.table.get(job.id).finished:
            self.table.finish(job.id, status, error=error, result=result)

    async def _run(self, job: Job) -> None:
        try:
            async with self._locks.setdefault(job.namespace, asyncio.Lock()):
                while True:  # another process may run a job of this namespace: wait for it
                    dead: list[Job] = []
                    state = self.table.claim(
                        job.id, scratch_name(job.id), self.owner, dead=self._dead, failed=dead
                    )
                    for gone in dead:  # a dead process's job held the namespace: its clone goes too
                        self._drop(gone)
                    if state == "gone":  # cancelled, or claimed by another process
                        return
                    if state == "claimed":
                        break
                    await asyncio.sleep(self.config.claim_poll)
                await self._execute(job)
        except asyncio.CancelledError:
            self._fail(job, "cancelled", "cancelled; nothing it did was applied")
        except MemrlError as e:  # the request or the store: the job fails, its namespace unchanged
            self._fail(job, "failed", f"{type(e).__name__}: {e}")
        except Exception as e:  # a bug: never a half-applied job, and the worker survives
            log.exception("job %s failed", job.id)
            self._fail(job, "failed", f"internal error: {type(e).__name__}")
        finally:
            self._tasks.pop(job.id, None)
            event = self._done.get(job.id)
            if event is not None:
                event.set()

    async def _execute(self, job: Job) -> None:
        store, ns = self.memory.store, job.namespace
        scratch = scratch_name(job.id)
        job.scratch = scratch
        try:
            base = start_scratch(store, ns, scratch)
            index = self.table.count_succeeded(ns, "remember") + 1
            progress = Progress(lambda p: self.table.progress(job.id, p), every=self.config.progress_every)
            with cache_scope(scratch):
                outcome = await run_kind(job.kind, self.llm, self.memory, scratch, job.request,
                                         session_index=index, progress=progress)  # fmt: skip
            result = self._result(outcome)
            result["progress"] = progress.to_dict()
            if outcome.failure is not None:
                self._fail(job, "failed", f"the LLM failed (after retries): {outcome.failure}; nothing was "
                           "applied", result)  # fmt: skip
                return
            events = diff(store, scratch, base)
            refused: list[dict[str, Any]] = []
            if not (job.kind == "remember" and job.request.get("agent") == "raw"):  # raw stores the turns
                known = [base.core, *(it.content for it in base.items.values())]
                events, refused = check_events(events, job_source(job.request, known))
            result["stats"]["refused"] = len(refused)
            try:
                check_deletes(
                    events, base, self.config.max_delete_share, bool(job.request.get("allow_mass_delete"))
                )
                result["progress"] = progress.done()
                applied = {**result, "stats": {**result["stats"], "changes": len(events)}}
                applied["events"] = events + refused + result["events"]
                if job.dry_run:
                    self.table.succeed_unapplied(job, self.owner, applied)
                else:
                    commit(store, self.table, job.id, ns, scratch, base, events, applied,
                           actor=f"job:{job.id}", owner=self.owner)  # fmt: skip
            except MemrlError as e:  # refused at the end (conflict, delete share): its progress, stats and
                # tokens are kept, its events are not (nothing was applied)
                self._fail(job, "failed", f"{type(e).__name__}: {e}", result)
                raise
        finally:
            self._drop(job)

    @staticmethod
    def _result(outcome: Outcome) -> dict[str, Any]:
        result: dict[str, Any] = {"events": outcome.skipped, "stats": outcome.stats, "tokens": outcome.tokens}
        if outcome.answer is not None:
            result["answer"] = outcome.answer
        return result
