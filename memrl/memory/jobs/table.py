"""Agent jobs in the store: what was asked of an agent on a namespace, its status, and what it changed.

A job (``remember``, ``maintain`` or ``read``; run by :mod:`memrl.agents.jobs`) is one row of the ``jobs``
table (SQLite migration 5, Postgres ``0003_jobs.sql``), so a restarted server finds every job it had::

    table = JobTable(store)
    job, created = table.create("alice", "remember", {"messages": [...]}, idempotency_key="req-1")
    table.get(job.id).status            # queued -> running -> succeeded | failed | cancelled

An idempotency key is unique per namespace and bound to its request: creating a job again with the same key
and the same request (kind, namespace, dry run, body: :func:`request_hash`) returns the first job
(``created`` False), so a retried request never builds twice; the same key with another request is refused
(:class:`~memrl.errors.ValidationError` naming the key), as payment APIs do, instead of silently answering
with a job that never saw the new request. While a job runs, the agent writes into a
scratch clone of the namespace (``scratch``); the namespace itself changes once, when the job commits
(:mod:`memrl.memory.jobs.changes`), in one history batch (``batch``) that undoes as a whole.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from memrl.errors import ConflictError, LimitError, NotFoundError, ValidationError
from memrl.memory.jobs.job import (
    _COLUMNS,
    FINISHED,
    STATUSES,
    Job,
    JobWriter,
    QueueLimits,
    canonical,
    check_messages,
    request_hash,
    scratch_name,
)
from memrl.memory.records import Name, check

_KEY = Name(200)

__all__ = [
    "FINISHED", "STATUSES", "Job", "JobTable", "JobWriter", "QueueLimits", "check_messages", "request_hash",
    "scratch_name",
]  # fmt: skip


class JobTable:
    """The ``jobs`` table of one store (either back-end: the store's ``?`` SQL and transactions)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def create(
        self,
        namespace: str,
        kind: str,
        request: dict[str, Any],
        *,
        idempotency_key: str | None = None,
        dry_run: bool = False,
        limits: QueueLimits | None = None,
    ) -> tuple[Job, bool]:
        """A new queued job, or (``created`` False) the job already holding ``idempotency_key`` in
        ``namespace`` for the same request (another request with that key: :class:`ValidationError`).
        ``limits``: the namespace's queue caps (:class:`~memrl.errors.LimitError` past them). Checked and
        written in one write transaction of the namespace: two requests with one key cannot both create a
        job, and two requests cannot both take the queue's last place."""
        self.store._check_namespace(namespace)
        if idempotency_key is not None:  # a name: 1-200 characters, no control characters or lone surrogates
            idempotency_key = check("idempotency_key", idempotency_key, _KEY)
        try:
            body = canonical(request)
            digest = request_hash(kind, namespace, body, dry_run)
        except (TypeError, ValueError) as e:
            raise ValidationError(f"a job's request must be JSON ({e})", field="request") from None
        with self.store.transaction(namespace) as c:
            if idempotency_key is not None:
                row = c.execute(
                    f"SELECT {_COLUMNS} FROM jobs WHERE namespace = ? AND idempotency_key = ?",
                    (namespace, idempotency_key),
                ).fetchone()
                if row is not None:
                    first = Job.from_row(row)
                    if first.hash != digest:
                        raise ValidationError(
                            f"Idempotency-Key {idempotency_key!r} was first sent with another request (job "
                            f"{first.id}, {first.kind}{' dry run' if first.dry_run else ''} on {namespace!r}); a "
                            "key stands for one request: send a new key with a new request",
                            field="idempotency_key",
                        )
                    return first, False
            if limits is not None and (limits.max_jobs is not None or limits.max_bytes is not None):
                jobs, size = c.execute(
                    "SELECT count(*), COALESCE(sum(length(request)), 0) FROM jobs "
                    "WHERE namespace = ? AND status = 'queued'",
                    (namespace,),
                ).fetchone()
                if limits.max_jobs is not None and jobs >= limits.max_jobs:
                    raise LimitError(
                        f"namespace {namespace!r} has {jobs} jobs queued, the most it may have "
                        f"({limits.max_jobs}); retry once they ran",
                        retry_after=5,
                    )
                if limits.max_bytes is not None and int(size) + len(body) > limits.max_bytes:
                    raise LimitError(
                        f"namespace {namespace!r} has {int(size)} bytes of requests queued; this one "
                        f"({len(body)}) would pass the most it may hold ({limits.max_bytes}); retry once they ran",
                        retry_after=5,
                    )
            job = Job(uuid.uuid4().hex[:16], namespace, kind, "queued", request, idempotency_key, dry_run,
                      created_at=time.time(), request_hash=digest)  # fmt: skip
            c.execute(
                "INSERT INTO jobs (id, namespace, kind, status, request, idempotency_key, dry_run, created_at, "
                "request_hash) VALUES (?,?,?,?,?,?,?,?,?)",
                (job.id, namespace, kind, job.status, body, idempotency_key, int(dry_run), job.created_at,
                 digest),
            )  # fmt: skip
        return job, True

    def by_key(self, namespace: str, idempotency_key: str) -> Job | None:
        """The job holding ``idempotency_key`` in ``namespace``, if any."""
        rows = self.store.read(
            f"SELECT {_COLUMNS} FROM jobs WHERE namespace = ? AND idempotency_key = ?",
            (namespace, idempotency_key),
        )
        return Job.from_row(rows[0]) if rows else None

    def namespace_of(self, job_id: str) -> str | None:
        """The namespace job ``job_id`` runs on, or None when there is no such job."""
        rows = self.store.read("SELECT namespace FROM jobs WHERE id = ?", (job_id,))
        return rows[0][0] if rows else None

    def get(self, job_id: str) -> Job:
        rows = self.store.read(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
        if not rows:
            raise NotFoundError(f"no job {job_id!r}")
        return Job.from_row(rows[0])

    def list(
        self, namespace: str | None = None, *, statuses: Sequence[str] = (), limit: int = 100
    ) -> list[Job]:
        """Jobs, newest first; of one namespace, and with one of ``statuses``, when given."""
        where, params = ["1 = 1"], []
        if namespace is not None:
            where.append("namespace = ?")
            params.append(namespace)
        if statuses:
            where.append(f"status IN ({','.join('?' * len(statuses))})")
            params += list(statuses)
        sql = f"SELECT {_COLUMNS} FROM jobs WHERE {' AND '.join(where)} ORDER BY created_at DESC LIMIT ?"
        return [Job.from_row(r) for r in self.store.read(sql, [*params, int(limit)])]

    def count_succeeded(self, namespace: str, kind: str) -> int:
        """Jobs of ``kind`` that changed ``namespace`` (dry runs excluded): numbers remembered sessions."""
        return self.store.read(
            "SELECT count(*) FROM jobs WHERE namespace = ? AND kind = ? AND status = 'succeeded' AND dry_run = 0",
            (namespace, kind),
        )[0][0]

    def claim(
        self,
        job_id: str,
        scratch: str,
        owner: str,
        *,
        dead: Callable[[Job], bool],
        failed: list[Job] | None = None,
    ) -> str:
        """Start a queued job for process ``owner``, if no other job of its namespace runs: ``"claimed"``,
        ``"busy"`` (another job of the namespace runs, in this or another process; try again later) or
        ``"gone"`` (the job is no longer queued: another process took it, or it was cancelled).

        Checked and written in one write transaction of the namespace, so two processes on one store never
        run two jobs of a namespace at once. A running job whose process is ``dead`` does not hold the
        namespace: it is failed here and added to ``failed`` (its clone is the caller's to drop, as with
        :meth:`reap`)."""
        job = self.get(job_id)
        with self.store.transaction(job.namespace) as c:
            row = c.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None or row[0] != "queued":
                return "gone"
            running = [
                Job.from_row(r)
                for r in c.execute(
                    f"SELECT {_COLUMNS} FROM jobs WHERE namespace = ? AND status = 'running'",
                    (job.namespace,),
                ).fetchall()
            ]
            if any(not dead(r) for r in running):
                return "busy"
            for r in running:
                self._fail_dead(c, r)
                if failed is not None:
                    failed.append(r)
            now = time.time()
            c.execute(
                "UPDATE jobs SET status = 'running', scratch = ?, started_at = ?, owner = ?, heartbeat_at = ? "
                "WHERE id = ?",
                (scratch, now, owner, now, job_id),
            )
        return "claimed"

    def beat(self, owner: str) -> list[str]:
        """``owner`` is alive: its running jobs' heartbeat is now. Returns the ids of its jobs that another
        process finished meanwhile (cancelled, or failed as dead): the owner must stop them."""
        with self.store.transaction() as c:
            c.execute(
                "UPDATE jobs SET heartbeat_at = ? WHERE owner = ? AND status = 'running'",
                (time.time(), owner),
            )
        return [r[0] for r in self.store.read(
            "SELECT id FROM jobs WHERE owner = ? AND status IN ('failed', 'cancelled') AND finished_at > ?",
            (owner, time.time() - 3600),
        )]  # fmt: skip

    def reap(self, dead: Callable[[Job], bool]) -> list[Job]:
        """Fail the running jobs whose process is ``dead`` (nothing they did was applied: they wrote into
        their clones); returns them, so the caller drops their clones."""
        failed = []
        for job in self.list(statuses=("running",), limit=10_000):
            if not dead(job):
                continue
            with self.store.transaction(job.namespace) as c:
                row = c.execute("SELECT status, owner FROM jobs WHERE id = ?", (job.id,)).fetchone()
                if row is None or row[0] != "running" or row[1] != job.owner:
                    continue
                self._fail_dead(c, job)
            failed.append(job)
        return failed

    @staticmethod
    def _fail_dead(c: Any, job: Job) -> None:
        c.execute(
            "UPDATE jobs SET status = 'failed', error = ?, scratch = NULL, finished_at = ? WHERE id = ?",
            ("interrupted: the process running the job stopped; nothing it did was applied", time.time(),
             job.id),
        )  # fmt: skip

    def require_running(self, job_id: str, owner: str | None) -> None:
        """Inside a commit's transaction: the job is still ``owner``'s and running (another process may have
        cancelled it, or failed it as dead); otherwise :class:`ConflictError` and nothing is written."""
        rows = self.store.read("SELECT status, owner FROM jobs WHERE id = ?", (job_id,))
        if not rows or rows[0][0] != "running" or (owner is not None and rows[0][1] != owner):
            state = rows[0][0] if rows else "gone"
            raise ConflictError(
                f"job {job_id!r} is {state} (finished by another process); nothing was applied"
            )

    def progress(self, job_id: str, progress: dict[str, Any]) -> None:
        """Record how far a running job got (``result.progress``); a finished job's record is left alone."""
        with self.store.transaction() as c:
            row = c.execute("SELECT result, status FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None or row[1] != "running":
                return
            result = json.loads(row[0]) if row[0] else {}
            c.execute(
                "UPDATE jobs SET result = ? WHERE id = ?",
                (json.dumps({**result, "progress": progress}), job_id),
            )

    def finish(
        self,
        job_id: str,
        status: str,
        *,
        result: dict[str, Any] | None = None,
        error: str | None = None,
        batch: str | None = None,
    ) -> None:
        """Close a job. Called inside the commit's transaction, a success and its writes land together.
        Without a ``result`` the stored one (the progress recorded so far) is kept."""
        assert status in FINISHED, status
        with self.store.transaction() as c:
            c.execute(
                "UPDATE jobs SET status = ?, result = COALESCE(?, result), error = ?, batch = ?, scratch = NULL, "
                "finished_at = ? WHERE id = ?",
                (status, None if result is None else json.dumps(result), error, batch, time.time(), job_id),
            )

    def mark_undone(self, job_id: str) -> None:
        with self.store.transaction() as c:
            c.execute("UPDATE jobs SET undone = 1 WHERE id = ?", (job_id,))

    def close_unfinished(
        self, job_id: str, status: str, *, error: str, result: dict[str, Any] | None = None
    ) -> bool:
        """Close job ``job_id`` with ``status`` unless it finished meanwhile, in one transaction on its
        namespace; returns whether it closed it."""
        ns = self.namespace_of(job_id)
        if ns is None:
            return False
        with self.store.transaction(ns):
            if self.get(job_id).finished:
                return False
            self.finish(job_id, status, error=error, result=result)
        return True

    def cancel_unfinished(self, job: Job) -> None:
        """Mark ``job`` cancelled unless it finished meanwhile (one transaction on its namespace): a job
        queued, or run by another process whose heartbeat sees this and stops it (its commit is refused by
        :meth:`require_running`)."""
        self.close_unfinished(job.id, "cancelled", error="cancelled")

    def undo(self, job: Job, *, actor: str) -> None:
        """Revert every write of succeeded ``job`` (its history batch) and mark it undone, as one change."""
        with self.store.transaction(job.namespace):
            self.store.undo_batch(job.namespace, job.batch, actor=actor)
            self.mark_undone(job.id)

    def succeed_unapplied(self, job: Job, owner: str | None, result: dict[str, Any]) -> None:
        """A dry run's end: ``job`` succeeded with ``result`` and nothing of it applied (refused with
        :class:`ConflictError` when it is no longer ``owner``'s running job)."""
        with self.store.transaction(job.namespace):
            self.require_running(job.id, owner)
            self.finish(job.id, "succeeded", result=result)

    def running_of(self, owner: str) -> list[str]:
        """Ids of the jobs the table says ``owner`` runs."""
        rows = self.store.read("SELECT id FROM jobs WHERE owner = ? AND status = 'running'", (owner,))
        return [r[0] for r in rows]

    def unfinished(self) -> list[Job]:
        """Jobs queued or running: after a restart, the queued ones run again and the running ones failed."""
        rows = self.store.read(
            f"SELECT {_COLUMNS} FROM jobs WHERE status IN ('queued', 'running') ORDER BY created_at"
        )
        return [Job.from_row(r) for r in rows]
