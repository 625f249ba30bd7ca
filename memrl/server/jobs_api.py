"""The job routes of the memory API: conversations in, memories out, through the agents, as background jobs.

    POST /v1/namespaces/{ns}/remember   {"messages": [{"role", "content", "name"|"speaker"?, "timestamp"?}], "session_time"?,
                                         "agent": "membuilder" | "raw", "dry_run"?}      -> 202 {"id", "status", ...}
    POST /v1/namespaces/{ns}/maintain   {"max_tool_calls"?, "question"?, "allow_mass_delete"?, "dry_run"?}
    POST /v1/namespaces/{ns}/read       {"document", "question"?, "title"?, "dry_run"?}
    GET  /v1/namespaces/{ns}/jobs       the namespace's jobs, newest first
    GET  /v1/jobs/{id}                  status, events, stats, tokens, answer, error, time
    POST /v1/jobs/{id}/cancel           nothing it did is applied
    POST /v1/jobs/{id}/undo             reverts exactly that job (409 naming the items changed later)

A job's id comes back at once (202); ``?wait=true`` waits for it up to ``timeout`` seconds (default 30) and
answers 200 once it finished, 202 if it is still going. A wait holds no thread and no place among the
requests in flight; one token may have ``max_waits_per_token`` of them at once (429 past it). An
``Idempotency-Key`` header (or the body's ``idempotency_key``) makes a retried request return the first job
instead of running again; the key is bound to its request (route, namespace, body, ``dry_run``), and the
same key with another request is 422 naming the key. Queued jobs and their bytes are capped per namespace
and per token (429 with ``Retry-After``). The LLM behind
the agents is the server's (``memrl serve memory --llm``); the runner is :mod:`memrl.agents.jobs`. A token
sees the jobs of its namespaces only (another namespace's job is 404, as if it did not exist).
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

import pydantic
from fastapi import APIRouter, Depends, Header, Path, Query
from fastapi.responses import Response
from pydantic import AfterValidator

from memrl.agents.jobs import JobRunner
from memrl.errors import NotFoundError
from memrl.memory.jobs import Job
from memrl.memory.records import Name, check
from memrl.server.http import Principal, Tokens, bearer_dependency, json_bytes
from memrl.server.limits import Waits
from memrl.server.offload import ServedMemory

_Text = Annotated[str, pydantic.Field(min_length=1, max_length=100_000)]


def _plain_key(value: str | None) -> str | None:
    """An idempotency key is a name: 1-200 characters, no control characters or lone surrogates."""
    return None if value is None else check("idempotency_key", value, _KEY_NAME)


_KEY_NAME = Name(200)
_Key = Annotated[str | None, pydantic.Field(None, min_length=1, max_length=200), AfterValidator(_plain_key)]
KeyHeader = Annotated[str | None, Header(min_length=1, max_length=200), AfterValidator(_plain_key)]


class TextPart(pydantic.BaseModel):
    type: Literal["text"]
    text: Annotated[str, pydantic.Field(max_length=100_000)]


class Message(pydantic.BaseModel):
    """A turn, in OpenAI's chat format (``name``: the speaker; content: text or text parts) or memrl's."""

    model_config = pydantic.ConfigDict(extra="forbid")
    role: Annotated[str, pydantic.Field(min_length=1, max_length=50, description="user, assistant, ...")]
    content: _Text | Annotated[list[TextPart], pydantic.Field(min_length=1, max_length=100)]
    speaker: Annotated[str | None, pydantic.Field(None, max_length=200, description="the speaker's name")]
    name: Annotated[
        str | None, pydantic.Field(None, max_length=200, description="the speaker (OpenAI's name)")
    ]
    timestamp: Annotated[str | None, pydantic.Field(None, max_length=64, description="ISO date-time")]


class _JobRequest(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    dry_run: bool = pydantic.Field(
        False, description="run on a clone and return the events, applying nothing"
    )
    idempotency_key: _Key = None


class RememberRequest(_JobRequest):
    messages: Annotated[list[Message], pydantic.Field(min_length=1, max_length=2000)]
    session_time: Annotated[str | None, pydantic.Field(None, max_length=64, description="ISO date-time")]
    agent: Literal["membuilder", "raw"] | None = pydantic.Field(
        None,
        description="membuilder (the default when the server has a model) or raw (the turns as said; the "
        "default without one)",
    )


class MaintainRequest(_JobRequest):
    max_tool_calls: int = pydantic.Field(30, ge=1, le=200, description="the episode's tool-call budget")
    question: Annotated[str | None, pydantic.Field(None, max_length=2000)] = None
    allow_mass_delete: bool = pydantic.Field(False, description="allow deleting more than the server's share")


class ReadRequest(_JobRequest):
    document: Annotated[str, pydantic.Field(min_length=1, max_length=2_000_000)]
    question: Annotated[str | None, pydantic.Field(None, max_length=2000)] = None
    title: Annotated[str | None, pydantic.Field(None, max_length=200)] = None


NamespacePath = Annotated[str, Path(min_length=1, max_length=200)]
Wait = Annotated[bool, Query(description="wait for the job to finish (up to timeout seconds)")]
Timeout = Annotated[float, Query(gt=0, le=600, description="seconds ?wait=true waits")]


async def _answer(job: Job) -> Any:
    """The job as JSON, 200 once finished (202 before), encoded on a thread (its request and events may be a
    megabyte or more: on the event loop that held every other request)."""
    body = await asyncio.to_thread(json_bytes, job.to_dict())
    return Response(body, status_code=200 if job.finished else 202, media_type="application/json")


def jobs_router(
    runner: JobRunner, tokens: Tokens, served: ServedMemory | None = None, waits: Waits | None = None
) -> APIRouter:
    """The job routes; their store reads through ``served``'s gate, their waits counted in ``waits``."""
    auth = bearer_dependency(tokens)
    router = APIRouter(prefix="/v1", tags=["jobs"])
    waits = waits or Waits(8, 1000)

    def client(who: Principal) -> str | None:
        return who.name if tokens.enabled else None

    async def stored(fn: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs) if served is None else await served.call((), fn, *args, **kwargs)

    async def waited(job: Job, who: Principal, timeout: float) -> Job:
        if job.finished:
            return job
        with waits.enter(client(who)):
            return await runner.wait(job.id, timeout)

    async def submit(ns: str, kind: str, req: _JobRequest, who: Principal, key: str | None, wait: bool,
                     timeout: float) -> Any:  # fmt: skip
        who.check(ns)
        body = req.model_dump(exclude={"dry_run", "idempotency_key"}, exclude_none=True)
        job, _ = await runner.submit(ns, kind, body, idempotency_key=key or req.idempotency_key,
                                     dry_run=req.dry_run, client=who.name)  # fmt: skip
        if wait:
            job = await waited(job, who, timeout)
        return await _answer(job)

    @router.post("/namespaces/{namespace}/remember", status_code=202, summary="Remember a conversation")
    async def remember(namespace: NamespacePath, req: RememberRequest, wait: Wait = False,
                       timeout: Timeout = 30.0, idempotency_key: KeyHeader = None,
                       who: Principal = Depends(auth)) -> Any:  # fmt: skip
        """MemBuilder builds memory from the messages as one session (``agent="raw"`` stores the turns)."""
        return await submit(namespace, "remember", req, who, idempotency_key, wait, timeout)

    @router.post("/namespaces/{namespace}/maintain", status_code=202, summary="Maintain a namespace")
    async def maintain(namespace: NamespacePath, req: MaintainRequest, wait: Wait = False,
                       timeout: Timeout = 30.0, idempotency_key: KeyHeader = None,
                       who: Principal = Depends(auth)) -> Any:  # fmt: skip
        """One MemUpdate episode over the namespace, with a tool-call budget."""
        return await submit(namespace, "maintain", req, who, idempotency_key, wait, timeout)

    @router.post("/namespaces/{namespace}/read", status_code=202, summary="Read a document into memory")
    async def read(namespace: NamespacePath, req: ReadRequest, wait: Wait = False, timeout: Timeout = 30.0,
                   idempotency_key: KeyHeader = None,
                   who: Principal = Depends(auth)) -> Any:  # fmt: skip
        """MemAgent reads the document chunk by chunk and stores its final memory (and answers a question)."""
        return await submit(namespace, "read", req, who, idempotency_key, wait, timeout)

    @router.get("/namespaces/{namespace}/jobs", summary="A namespace's jobs")
    async def list_jobs(namespace: NamespacePath, limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                        who: Principal = Depends(auth)) -> list[dict[str, Any]]:  # fmt: skip
        who.check(namespace)
        await runner.start()
        return [j.to_dict() for j in await stored(runner.table.list, namespace, limit=limit)]

    async def visible(job_id: str, who: Principal) -> Job:
        await runner.start()
        job = await stored(runner.get, job_id)
        if not who.allows(job.namespace):
            raise NotFoundError(f"no job {job_id!r}")
        return job

    @router.get("/jobs/{job_id}", summary="A job")
    async def get_job(job_id: str, wait: Wait = False, timeout: Timeout = 30.0,
                      who: Principal = Depends(auth)) -> Any:  # fmt: skip
        job = await visible(job_id, who)
        return await _answer(await waited(job, who, timeout) if wait else job)

    @router.post("/jobs/{job_id}/cancel", summary="Cancel a job")
    async def cancel_job(job_id: str, who: Principal = Depends(auth)) -> Any:
        job = await visible(job_id, who)
        return await _answer(await runner.cancel(job.id))

    @router.post("/jobs/{job_id}/undo", summary="Undo a job")
    async def undo_job(job_id: str, who: Principal = Depends(auth)) -> Any:
        job = await visible(job_id, who)
        return await _answer(await runner.undo(job.id, actor=f"api:{who.name}"))

    return router
