"""Agent jobs in the store: what was asked of an agent on a namespace, its status, and what it changed.

A job (``remember``, ``maintain`` or ``read``; run by :mod:`memrl.agents.jobs`) is one row of the ``jobs``
table (SQLite migration 5, Postgres ``0003_jobs.sql``), so a restarted server finds every job it had::

    table = JobTable(store)
    job, created = table.create("alice", "remember", {"messages": [...]}, idempotency_key="req-1")
    table.get(job.id).status            # queued -> running -> succeeded | failed | cancelled

An idempotency key is unique per namespace: creating a job again with the same key returns the first job
(``created`` False), so a retried request never builds twice. While a job runs, the agent writes into a
scratch clone of the namespace (``scratch``); the namespace itself changes once, when the job commits
(:mod:`memrl.memory.jobs.changes`), in one history batch (``batch``) that undoes as a whole.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from memrl.errors import ConflictError, NotFoundError, ValidationError

STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
FINISHED = ("succeeded", "failed", "cancelled")
_COLUMNS = (
    "id, namespace, kind, status, request, idempotency_key, dry_run, scratch, batch, result, error, "
    "created_at, started_at, finished_at, undone, owner, heartbeat_at"
)


@dataclass
class Job:
    """One job as stored. ``result`` holds ``events``, ``stats``, ``tokens`` (and ``answer`` for a read)."""

    id: str
    namespace: str
    kind: str
    status: str
    request: dict[str, Any]
    idempotency_key: str | None = None
    dry_run: bool = False
    scratch: str | None = None
    batch: str | None = None
    result: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    created_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    undone: bool = False
    owner: str | None = None  # the process running it (JobTable.claim)
    heartbeat_at: float | None = None

    @property
    def events(self) -> list[dict[str, Any]]:
        """What the job changed (or, for a dry run, would change), and what it skipped."""
        return self.result.get("events", [])

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def seconds(self) -> float | None:
        """Time from start to finish (so far, while it runs); None before it starts."""
        if self.started_at is None:
            return None
        return (self.finished_at or time.time()) - self.started_at

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "namespace": self.namespace, "kind": self.kind, "status": self.status,
            "request": self.request, "idempotency_key": self.idempotency_key, "dry_run": self.dry_run,
            "events": self.result.get("events", []), "stats": self.result.get("stats", {}),
            "tokens": self.result.get("tokens", {}), "answer": self.result.get("answer"),
            "progress": self.result.get("progress"), "error": self.error, "undone": self.undone,
            "created_at": self.created_at, "started_at": self.started_at, "finished_at": self.finished_at,
            "seconds": self.seconds,
        }  # fmt: skip

    @classmethod
    def from_row(cls, r: Sequence[Any]) -> Job:
        return cls(
            id=r[0], namespace=r[1], kind=r[2], status=r[3], request=json.loads(r[4]), idempotency_key=r[5],
            dry_run=bool(r[6]), scratch=r[7], batch=r[8], result=json.loads(r[9]) if r[9] else {},
            error=r[10], created_at=r[11], started_at=r[12], finished_at=r[13], undone=bool(r[14]),
            owner=r[15], heartbeat_at=r[16],
        )  # fmt: skip


@runtime_checkable
class JobWriter(Protocol):
    """What runs agent jobs for :class:`~memrl.memory.facade.memory.AsyncMemory` (``remember``, ``maintain``,
    ``read``): the memory layer names it, the agents layer implements it (:class:`memrl.agents.jobs.JobRunner`;
    ``memrl.agents.jobs.job_writer(spec)`` builds one from an LLM spec), and a memory is given one with
    ``AsyncMemory(..., writer=...)``, which calls :meth:`attach` with itself."""

    def attach(self, memory: Any) -> None:
        """Run jobs on ``memory`` (called once, by the memory the writer is given to)."""

    async def submit(
        self,
        namespace: str,
        kind: str,
        request: dict[str, Any],
        *,
        idempotency_key: str | None = None,
        dry_run: bool = False,
    ) -> tuple[Job, bool]:
        """Queue a job; returns it and whether it is new (False: ``idempotency_key`` named an earlier one)."""
        ...

    async def wait(self, job_id: str, timeout: float | None = None) -> Job:
        """The job once finished, or as it is after ``timeout`` seconds."""
        ...

    def get(self, job_id: str) -> Job: ...

    async def cancel(self, job_id: str) -> Job: ...

    async def undo(self, job_id: str, *, actor: str | None = None) -> Job: ...

    async def close(self) -> None: ...


_ROLE_KEYS = frozenset({"role", "content", "speaker", "name", "timestamp"})


def _text_of(content: Any, i: int) -> Any:
    """A message's content as text: OpenAI's list of text parts (``[{"type": "text", "text": ...}]``) joined
    by newlines; anything else is returned as it is (and checked by the caller)."""
    if not isinstance(content, list):
        return content
    texts = []
    for j, part in enumerate(content):
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise ValidationError(
                f"messages[{i}].content[{j}]: only text parts are remembered ({{'type': 'text', 'text': ...}}), "
                f"got {kind!r}",
                field="messages",
            )
    return "\n".join(texts)


def check_messages(messages: Any) -> list[dict[str, Any]]:
    """A ``remember`` job's messages, checked and normalised: a non-empty list of ``{"role", "content",
    "speaker"?, "timestamp"?}`` with non-empty text. OpenAI's chat format is accepted as it is: ``name`` is
    the speaker, and ``content`` may be a list of text parts (joined). Used by the Python API, the CLI, the
    REST API and the MCP tools alike."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise ValidationError(
            "messages must be a non-empty list of {role, content} objects", field="messages"
        )
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ValidationError(f"messages[{i}] is not an object", field="messages")
        extra = set(m) - _ROLE_KEYS
        if extra:
            raise ValidationError(
                f"messages[{i}]: unknown field(s) {', '.join(sorted(extra))}; allowed: role, content, speaker "
                "(or name, as OpenAI's format has it), timestamp",
                field="messages",
            )
        m = {**m, "content": _text_of(m.get("content"), i)}
        name = m.pop("name", None)
        if name is not None and m.get("speaker") is None:
            m["speaker"] = name
        for key in ("role", "content"):
            if not isinstance(m.get(key), str) or not m[key].strip():
                raise ValidationError(f"messages[{i}].{key} must be non-empty text", field="messages")
        for key in ("speaker", "timestamp"):
            if m.get(key) is not None and not isinstance(m[key], str):
                raise ValidationError(f"messages[{i}].{key} must be text", field="messages")
        out.append({k: v for k, v in m.items() if v is not None})
    return out


def scratch_name(job_id: str) -> str:
    """The namespace a job's agent writes into while it runs (dropped when the job ends)."""
    return f"__job__/{job_id}"


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
    ) -> tuple[Job, bool]:
        """A new queued job, or (``created`` False) the job already holding ``idempotency_key`` in
        ``namespace``. Checked and written in one write transaction of the namespace: two requests with
        one key cannot both create a job."""
        self.store._check_namespace(namespace)
        with self.store.transaction(namespace) as c:
            if idempotency_key is not None:
                row = c.execute(
                    f"SELECT {_COLUMNS} FROM jobs WHERE namespace = ? AND idempotency_key = ?",
                    (namespace, idempotency_key),
                ).fetchone()
                if row is not None:
                    return Job.from_row(row), False
            job = Job(uuid.uuid4().hex[:16], namespace, kind, "queued", request, idempotency_key, dry_run,
                      created_at=time.time())  # fmt: skip
            c.execute(
                "INSERT INTO jobs (id, namespace, kind, status, request, idempotency_key, dry_run, created_at) "
                "VALUES (?,?,?,?,?,?,?,?)",
                (job.id, namespace, kind, job.status, json.dumps(request), idempotency_key, int(dry_run),
                 job.created_at),
            )  # fmt: skip
        return job, True

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
        """Record how far a running job got (``result.progress``)."""
        with self.store.transaction() as c:
            row = c.execute("SELECT result FROM jobs WHERE id = ?", (job_id,)).fetchone()
            result = json.loads(row[0]) if row and row[0] else {}
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

    def cancel_unfinished(self, job: Job) -> None:
        """Mark ``job`` cancelled unless it finished meanwhile (one transaction on its namespace): a job
        queued, or run by another process whose heartbeat sees this and stops it (its commit is refused by
        :meth:`require_running`)."""
        with self.store.transaction(job.namespace):
            if not self.get(job.id).finished:
                self.finish(job.id, "cancelled", error="cancelled")

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

    def unfinished(self) -> list[Job]:
        """Jobs queued or running: after a restart, the queued ones run again and the running ones failed."""
        rows = self.store.read(
            f"SELECT {_COLUMNS} FROM jobs WHERE status IN ('queued', 'running') ORDER BY created_at"
        )
        return [Job.from_row(r) for r in rows]
