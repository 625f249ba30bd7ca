"""The job runner: remember / maintain / read requests run in the background, one writer per namespace.

The service (REST, MCP), the CLI and ``AsyncMemory.remember`` hand jobs to a :class:`JobRunner`::

    runner = JobRunner(memory, llm)                        # llm: the server's choice; None = only raw remember
    memory = AsyncMemory("m.db", writer=job_writer())      # the same, given to a memory (its JobWriter)
    await runner.start()                                   # after a restart: interrupted jobs failed, queue resumed
    job, created = await runner.submit("alice", "remember", {"messages": [...]}, idempotency_key="k1")
    job = await runner.wait(job.id, timeout=60)            # job.status, job.result["events"]
    await runner.undo(job.id)                              # exactly that job's writes; 409 if touched later

How a job runs (see :mod:`memrl.memory.jobs.changes`): its namespace is cloned into a scratch namespace, the
agent (:mod:`memrl.agents.jobs.kinds`) works on the clone, the differences become the job's events, and they
are written into the namespace in one transaction and one history batch, with the job's row. So a failed,
cancelled or killed job left nothing in its namespace, a dry run is the job without that last step, and
undo reverts one batch. Before that step every change an agent wrote goes through the write check
(:mod:`memrl.agents.jobs.write_check`): junk (repetition loops, text from nowhere) is refused, shown as a
``refused`` event and counted in ``stats["refused"]``, never stored. Jobs of one namespace run one at a time, in order (a lock per namespace in a
process, and an atomic claim in the store across processes: several server processes may share one store);
jobs of different namespaces run at once. Every job is a row of the store's ``jobs`` table
(:mod:`memrl.memory.jobs.table`) naming the process that runs it (``owner``: host, pid, a random id) and when that
process last said it was alive (``heartbeat_at``, every ``heartbeat_every`` seconds). A job whose process is
dead (on this host: its pid is gone or, in this process, its runner closed; on another host: no heartbeat for
``stale_after`` seconds) is marked failed and its scratch clone dropped, by :meth:`JobRunner.start` after a
restart or by any live runner's heartbeat; queued jobs run again.

The runner's own store work (the claim, the clone, the diff, the commit, the job rows) runs on a few threads
of its own, so an event loop serving requests never waits for the store: a store locked by another process
holds those threads, not the loop. A step that finds the store busy is retried until ``commit_wait``
seconds have passed, then the job fails with nothing applied. Before its commit a job's diff is measured
against the destruction budget (:mod:`memrl.memory.jobs.budget`); over it, the job fails with the figure in
its events. Each namespace, and each client (the token a server names in :meth:`JobRunner.submit`), may
have only so many jobs and request bytes queued (:class:`~memrl.agents.jobs.config.JobConfig`; past them
:class:`~memrl.errors.LimitError`, a 429). Errors a job records never carry the store's path, a host or SQL
(:func:`memrl.errors.public_message`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from functools import partial
from typing import Any

from memrl.agents.jobs import owners as job_owners
from memrl.agents.jobs.config import JobConfig
from memrl.agents.jobs.kinds import KINDS, Outcome, run_kind
from memrl.agents.jobs.owners import Liveness
from memrl.agents.jobs.progress import Progress
from memrl.agents.jobs.queue import ClientQueues
from memrl.agents.jobs.watch import JobWatch
from memrl.agents.jobs.work import StoreWork
from memrl.agents.jobs.write_check import check_events, job_source
from memrl.errors import ConfigError, MemrlError, NotFoundError, ValidationError
from memrl.llm.base import LLM
from memrl.memory import AsyncMemory
from memrl.memory.index import cache_scope
from memrl.memory.jobs import (
    Job,
    JobTable,
    QueueLimits,
    canonical,
    check_destruction,
    check_messages,
    commit,
    diff,
    measure,
    request_hash,
    scratch_name,
    start_scratch,
)
from memrl.memory.store import patience

__all__ = ["JobRunner"]

log = logging.getLogger("memrl.agents.jobs")  # the name it had before the package


class JobRunner(Liveness):
    """Queues and runs agent jobs on one :class:`AsyncMemory` (see the module docstring); a
    :class:`~memrl.memory.jobs.table.JobWriter`. Built without a memory, it runs on the one it is given to
    (``AsyncMemory(..., writer=runner)`` calls :meth:`attach`)."""

    def __init__(
        self, memory: AsyncMemory | None = None, llm: LLM | None = None, config: JobConfig | None = None
    ) -> None:
        self.memory: AsyncMemory = None  # type: ignore[assignment]  # set by attach
        self.table: JobTable = None  # type: ignore[assignment]
        self.work: StoreWork = None  # type: ignore[assignment]
        self.llm = llm
        self.config = config or JobConfig()
        self.owner = job_owners.new_owner()
        self.queues = ClientQueues(
            self.config.max_queued_jobs_per_client, self.config.max_queued_bytes_per_client
        )
        self._heartbeat: asyncio.Task | None = None
        self.watch = JobWatch()  # its jobs' spans, and who hears of their model calls and ends (a server)
        if memory is not None:
            self.attach(memory)
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: dict[str, asyncio.Task] = {}
        self._done: dict[str, asyncio.Event] = {}
        self._started = False
        self._unwritten: dict[str, tuple[str, str, dict[str, Any] | None]] = {}  # a job's end, not stored yet
        self._undropped: set[str] = set()  # jobs whose clone a busy store kept us from dropping

    # ------------------------------------------------------------------ life cycle
    def attach(self, memory: AsyncMemory) -> None:
        """Run jobs on ``memory`` (one memory per runner)."""
        if self.memory is not None and self.memory is not memory:
            raise ConfigError("this JobRunner already runs the jobs of another memory; make one per memory")
        self.memory, self.table = memory, JobTable(memory.store)
        self.work = StoreWork(memory.store, self.config.store_threads, self.config.commit_wait)

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
        job_owners.LIVE_OWNERS.add(self.owner)
        failed = await self.work.patient("restart", self._reap)
        for job in await self.work.off(self.table.unfinished):
            if job.status == "queued":
                self._schedule(job.id, job.namespace)
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
        job_owners.LIVE_OWNERS.discard(self.owner)
        if self.work is not None:
            self.work.close()

    # ------------------------------------------------------------------ requests
    async def submit(
        self,
        namespace: str,
        kind: str,
        request: dict[str, Any],
        *,
        idempotency_key: str | None = None,
        dry_run: bool = False,
        client: str | None = None,
    ) -> tuple[Job, bool]:
        """Queue a job; returns it and whether it is new (False: the idempotency key named an earlier one,
        for the same request; another request with that key is a :class:`ValidationError`). ``client``: who
        asks (a server's token name): its queued jobs and bytes are capped (:class:`~memrl.errors.LimitError`),
        as are the namespace's."""
        await self.start()
        if kind not in KINDS:
            raise ValidationError(f"unknown job kind {kind!r}; one of {', '.join(KINDS)}", field="kind")
        if kind == "remember":  # one format from every door: OpenAI's name and text parts become memrl's
            request = {**request, "messages": check_messages(request.get("messages"))}
        try:  # on a store thread: a request may be a megabyte of JSON
            size = await self.work.off(lambda: len(canonical(request)))
        except (TypeError, ValueError) as e:
            raise ValidationError(f"a job's request must be JSON ({e})", field="request") from None
        who = client or "local"
        why = self.queues.over(who, size)
        if why is not None:
            known = await self.work.off(
                self._same_request, namespace, kind, request, idempotency_key, dry_run
            )
            if known is not None:  # a retry of a request already accepted is answered, not refused
                return known, False
            raise self.queues.refuse(who, why)
        limits = QueueLimits(self.config.max_queued_jobs, self.config.max_queued_bytes)
        with self.queues.place(who, size):
            job, created = await self.work.patient("submission", self.table.create, namespace, kind, request,
                                                   idempotency_key=idempotency_key, dry_run=dry_run,
                                                   limits=limits)  # fmt: skip
        if created:
            self.queues.add(job.id, who, size)
            self._schedule(job.id, job.namespace)
        return job, created

    def _same_request(
        self, ns: str, kind: str, request: dict[str, Any], key: str | None, dry_run: bool
    ) -> Job | None:
        """The job ``key`` names in ``ns`` if it was made by this very request (else None)."""
        if key is None:
            return None
        job = self.table.by_key(ns, key)
        return job if job is not None and job.hash == request_hash(kind, ns, request, dry_run) else None

    def get(self, job_id: str) -> Job:
        return self.table.get(job_id)

    async def wait(self, job_id: str, timeout: float | None = None) -> Job:
        """The job once finished, or as it is after ``timeout`` seconds. Waiting holds no thread: a job of
        this process is awaited, one another process runs is looked at every ``wait_poll`` seconds."""
        job = await self.work.off(self.table.get, job_id)
        if job.finished or timeout == 0:
            return job
        event = self._done.get(job_id)
        if event is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(event.wait(), timeout)
            return await self.work.off(self.table.get, job_id)
        deadline = None if timeout is None else time.monotonic() + timeout
        while not job.finished:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            await asyncio.sleep(self.config.wait_poll if left is None else min(self.config.wait_poll, left))
            job = await self.work.off(self.table.get, job_id)
        return job

    async def cancel(self, job_id: str) -> Job:
        """Cancel a queued or running job (nothing it did is applied); a finished job is returned as it is."""
        job = await self.work.off(self.table.get, job_id)
        task = self._tasks.get(job_id)
        if not job.finished and task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        elif not job.finished:  # queued or run by another process: its heartbeat sees this and stops it,
            # and its commit is refused (JobTable.require_running)
            await self.work.patient("cancel", self.table.cancel_unfinished, job)
        return await self.work.off(self.table.get, job_id)

    async def undo(self, job_id: str, *, actor: str | None = None) -> Job:
        """Revert every write of a succeeded job, as one change (refused with 409 naming the items a later
        change touched; 404 when the job wrote nothing or was undone already)."""
        job = await self.work.off(self.table.get, job_id)
        if job.batch is None or job.undone:
            state = "was undone already" if job.undone else f"changed nothing ({job.status})"
            raise NotFoundError(f"nothing to undo: job {job_id!r} {state}")
        lock = self._locks.setdefault(job.namespace, asyncio.Lock())
        async with lock:  # not in the middle of another job of the namespace
            await self.work.off(self.table.undo, job, actor=actor or f"undo:job:{job_id}")
        return await self.work.off(self.table.get, job_id)

    # ------------------------------------------------------------------ running
    def _schedule(self, job_id: str, namespace: str) -> None:
        """Run the job when its namespace is free. While it waits it holds its id: its request stays in the
        store until it runs."""
        self._done[job_id] = asyncio.Event()
        self._tasks[job_id] = asyncio.get_running_loop().create_task(
            self._run(job_id, namespace), name=f"job-{job_id}"
        )
        if len(self._done) > self.config.keep_finished:
            for jid in [j for j in self._done if j not in self._tasks][: len(self._done) // 2]:
                self._done.pop(jid, None)

    def _drop(self, job_id: str, scratch: str | None) -> None:
        scratch = scratch or scratch_name(job_id)
        self.memory.store.drop_namespace(scratch)
        self.memory.index.forget(scratch)

    async def _fail(self, job_id: str, status: str, error: str, result: dict[str, Any] | None = None) -> None:
        """Close the job with ``status`` unless it finished. While the store is busy this is retried, then
        left to the heartbeat (the job stays running in the table until then). No path, host or SQL in it."""
        error = self.work.public(error)
        self.watch.note(job_id, status)
        if result is not None:
            result = {**result, "events": [self.work.public_event(e) for e in result.get("events", [])]}
        try:
            await self.work.patient(
                "end", self.table.close_unfinished, job_id, status, error=error, result=result
            )
        except MemrlError:
            log.warning("job %s: its end (%s) could not be written yet", job_id, status, exc_info=True)
            self._unwritten[job_id] = (status, error, result)

    async def _run(self, job_id: str, namespace: str) -> None:
        try:
            async with self._locks.setdefault(namespace, asyncio.Lock()):
                while True:  # another process may run a job of this namespace: wait for it
                    dead: list[Job] = []
                    state = await self.work.patient("start", self.table.claim, job_id, scratch_name(job_id),
                                                    self.owner, dead=self._dead, failed=dead)  # fmt: skip
                    for gone in dead:  # a dead process's job held the namespace: its clone goes too
                        await self.work.off(self._drop, gone.id, gone.scratch)
                    if state == "gone":  # cancelled, or claimed by another process
                        return
                    if state == "claimed":
                        break
                    await asyncio.sleep(self.config.claim_poll)
                self.queues.release(job_id)
                job = await self.work.off(self.table.get, job_id)
                with self.watch.running(job, self.llm is not None):
                    await self._execute(job)
        except asyncio.CancelledError:
            await self._fail(job_id, "cancelled", "cancelled; nothing it did was applied")
        except MemrlError as e:  # the request or the store: the job fails, its namespace unchanged
            await self._fail(job_id, "failed", f"{type(e).__name__}: {e}")
        except Exception as e:  # a bug: never a half-applied job, and the worker survives
            log.exception("job %s failed", job_id)
            await self._fail(job_id, "failed", f"internal error: {type(e).__name__}")
        finally:
            self.queues.release(job_id)
            self._tasks.pop(job_id, None)
            event = self._done.get(job_id)
            if event is not None:
                event.set()

    async def _report(self, job_id: str, progress: dict[str, Any]) -> None:
        """Write a running job's progress (a busy store skips it: the next report or the job's end has it)."""
        with contextlib.suppress(MemrlError):
            await self.work.off(self.table.progress, job_id, progress)

    async def _execute(self, job: Job) -> None:
        store, ns, work = self.memory.store, job.namespace, self.work
        scratch = scratch_name(job.id)
        job.scratch = scratch
        try:
            base = await work.patient("start", start_scratch, store, ns, scratch)
            index = await work.off(self.table.count_succeeded, ns, "remember") + 1
            progress = Progress(partial(self._report, job.id), every=self.config.progress_every)
            with cache_scope(scratch), patience(self.config.commit_wait):  # the clone is the job's own: its
                # writes wait for a store another writer holds (on a thread, never the event loop)
                run = partial(run_kind, job.kind, self.llm, self.memory, scratch, job.request,
                              session_index=index, progress=progress)  # fmt: skip
                if job.kind == "remember" and (job.request.get("agent") == "raw" or self.llm is None):
                    # no model: all of it is store work (a maximal conversation is ~1 MB to embed and write),
                    # so it runs on a store thread with a loop of its own, in this context
                    ctx = contextvars.copy_context()
                    outcome = await work.off(ctx.run, asyncio.run, run())
                else:
                    outcome = await run()
            result = self._result(outcome)
            result["progress"] = progress.to_dict()
            if outcome.failure is not None:
                await self._fail(job.id, "failed", f"the model or the store failed (after retries): {outcome.failure}; "
                                 "nothing was applied", result)  # fmt: skip
                return
            events = await work.off(diff, store, scratch, base)
            written: list[dict[str, Any]] = []  # changes the write check refused: shown, never stored
            if not (job.kind == "remember" and job.request.get("agent") == "raw"):  # raw stores the turns
                known = [base.core, *(it.content for it in base.items.values())]
                events, written = await work.off(check_events, events, job_source(job.request, known))
            result["stats"]["refused"] = len(written)
            destruction = await work.off(measure, events, base, self.config.destruction_budget)
            result["stats"]["destruction"] = destruction.as_dict()
            result["progress"] = progress.done(send=False)
            try:
                check_destruction(destruction, bool(job.request.get("allow_mass_delete")))
            except ValidationError:  # over the budget: the figure in its events, nothing applied (a dry
                # run also shows what it would have done)
                refused = {"event": "refused", "id": None, "type": None, "before": None, "after": None,
                           "op": None, "reason": destruction.reason(), "destruction": destruction.as_dict()}  # fmt: skip
                result["events"] = [*(events if job.dry_run else []), refused, *written, *result["events"]]
                await self._fail(job.id, "failed", f"ValidationError: {destruction.reason()}", result)
                raise
            applied = {**result, "stats": {**result["stats"], "changes": len(events)}}
            applied["events"] = [*events, *written, *(work.public_event(e) for e in result["events"])]
            try:
                if job.dry_run:
                    await work.patient("end", self.table.succeed_unapplied, job, self.owner, applied)
                else:
                    await work.patient("commit", commit, store, self.table, job.id, ns, scratch, base, events,
                                       applied, actor=f"job:{job.id}", owner=self.owner)  # fmt: skip
            except MemrlError as e:  # refused at the end (a conflict, a busy store): its progress, stats and
                # tokens are kept, its events are not (nothing was applied)
                await self._fail(job.id, "failed", f"{type(e).__name__}: {e}", result)
                raise
        finally:
            try:
                await work.patient("clean-up", self._drop, job.id, scratch)
            except MemrlError:  # the next heartbeat tries again
                self._undropped.add(job.id)

    @staticmethod
    def _result(outcome: Outcome) -> dict[str, Any]:
        result: dict[str, Any] = {"events": outcome.skipped, "stats": outcome.stats, "tokens": outcome.tokens}
        if outcome.answer is not None:
            result["answer"] = outcome.answer
        return result
