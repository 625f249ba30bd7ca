"""One agent job as the store keeps it (:class:`Job`), what its idempotency key is bound to
(:func:`request_hash`), the caps on a namespace's queue (:class:`QueueLimits`), the checks of a ``remember``
request's messages, and :class:`JobWriter`, the protocol the agents implement (:mod:`memrl.agents.jobs`).
The table of jobs is :mod:`memrl.memory.jobs.table`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from memrl.errors import ValidationError

STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
FINISHED = ("succeeded", "failed", "cancelled")
_COLUMNS = (
    "id, namespace, kind, status, request, idempotency_key, dry_run, scratch, batch, result, error, "
    "created_at, started_at, finished_at, undone, owner, heartbeat_at, request_hash"
)


def canonical(request: dict[str, Any]) -> str:
    """A request body as canonical JSON (sorted keys, no spaces, escaped non-ASCII): how the table stores it
    and what :func:`request_hash` hashes (``ValueError``/``TypeError`` for what is not JSON)."""
    return json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def request_hash(kind: str, namespace: str, request: dict[str, Any] | str, dry_run: bool) -> str:
    """The hash an idempotency key is bound to: of the job's kind, namespace, dry-run flag and request body
    (``request``, or its :func:`canonical` text), so a retry equal to the first request in meaning has the
    same hash whatever its key order or spacing."""
    body = request if isinstance(request, str) else canonical(request)
    head = json.dumps([kind, namespace, bool(dry_run)], ensure_ascii=True)
    return hashlib.sha256(f"{head}\n{body}".encode()).hexdigest()


@dataclass(frozen=True)
class QueueLimits:
    """The most jobs, and request bytes (their JSON), one namespace may have queued at once (None: no cap)."""

    max_jobs: int | None = None
    max_bytes: int | None = None


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
    request_hash: str | None = None  # what its idempotency key is bound to (request_hash)

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
            owner=r[15], heartbeat_at=r[16], request_hash=r[17],
        )  # fmt: skip

    @property
    def hash(self) -> str:
        """:func:`request_hash` of this job (stored, or computed for a row from before it was)."""
        return self.request_hash or request_hash(self.kind, self.namespace, self.request, self.dry_run)


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
