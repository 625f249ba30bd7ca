"""The agent jobs as typed tools (the MCP server lists them): remember a conversation, maintain the namespace,
read a document, a job's status, undo a job.

Each acts on the context's namespace only, through the memory's job writer
(:mod:`memrl.memory.facade.writes`); a job id of another namespace is answered as if it did not exist. A job
runs in the background: a tool waits up to ``wait_seconds`` (default 10) and otherwise returns the job still
queued or running, whose id ``job_status`` follows, so a client is never held for minutes.

    ctx = MemoryContext(AsyncMemory(path, writer=job_writer()), namespace="alice", actor="mcp")
    await JOB_TOOLS.call(ctx, "remember", {"messages": [{"role": "user", "content": "I moved to Lisbon"}]})
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pydantic
from pydantic import Field

from memrl.errors import NotFoundError
from memrl.memory.jobs import Job, JobTable
from memrl.tools.base import ToolResult, Toolset, tool
from memrl.tools.memupdate import MemoryContext

__all__ = ["JOB_TOOLS"]

WaitSeconds = Annotated[float, Field(ge=0, le=300)]
JobId = Annotated[str, Field(min_length=1, max_length=64)]


class TextPart(pydantic.BaseModel):
    """One text part of a message's content, as OpenAI's chat format has it."""

    type: Literal["text"]
    text: Annotated[str, Field(max_length=100_000)]


class Message(pydantic.BaseModel):
    """One turn of a conversation, in OpenAI's chat format (``name``: the speaker) or memrl's (``speaker``)."""

    model_config = pydantic.ConfigDict(extra="forbid")
    role: Annotated[str, Field(min_length=1, max_length=50, description="user, assistant, ...")]
    content: Annotated[
        Annotated[str, Field(min_length=1, max_length=100_000)]
        | Annotated[list[TextPart], Field(min_length=1, max_length=100)],
        Field(description="what was said: text, or a list of text parts"),
    ]
    speaker: Annotated[str | None, Field(max_length=200, description="the speaker's name")] = None
    name: Annotated[str | None, Field(max_length=200, description="the speaker's name (OpenAI's field)")] = (
        None
    )
    timestamp: Annotated[str | None, Field(max_length=64, description="ISO date-time")] = None


def summary(job: dict[str, Any], follow: str = "job_status(job_id={id!r})") -> str:
    """A job (as :meth:`Job.to_dict` gives it, or the REST API returns it) in a few lines: status, what
    changed, why it failed, and (``follow``) how to follow it while it runs."""
    events = job.get("events") or []
    counts: dict[str, int] = {}
    for e in events:
        counts[e["event"]] = counts.get(e["event"], 0) + 1
    changed = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "no changes"
    dry = ", dry run" if job.get("dry_run") else ""
    lines = [f"Job {job['id']} ({job['kind']}{dry}): {job['status']}; {changed}."]
    if job.get("undone"):
        lines.append("It was undone.")
    if job.get("error"):
        lines.append(f"Error: {job['error']}")
    if job.get("answer") is not None:
        lines.append(f"Answer: {job['answer']}")
    for e in events[:50]:
        text = e["after"] if e["after"] is not None else e.get("reason") or e["before"]
        lines.append(f"- {e['event']} {e.get('type') or ''} {e.get('id') or ''}: {text}")
    if job["status"] in ("queued", "running"):
        lines.append(f"Still {job['status']}: follow it with {follow.format(id=job['id'])}.")
    return "\n".join(lines)


def _result(job: Job) -> ToolResult:
    d = job.to_dict()
    return ToolResult(job.status != "failed", summary(d), data=d, error=job.error)


async def _finish(ctx: MemoryContext, job: Job, wait_seconds: float) -> ToolResult:
    if wait_seconds > 0 and not job.finished:
        job = await ctx.memory.job(job.id, wait=True, timeout=wait_seconds)
    return _result(job)


def _own(ctx: MemoryContext, job_id: str) -> None:
    if JobTable(ctx.memory.store).namespace_of(job_id) != ctx.namespace:
        raise NotFoundError(f"no job {job_id!r} in namespace {ctx.namespace!r}")


@tool
async def remember(
    ctx: MemoryContext,
    messages: Annotated[list[Message], Field(min_length=1, max_length=2000)],
    session_time: Annotated[str | None, Field(max_length=64)] = None,
    builder: Literal["membuilder", "raw"] | None = None,
    dry_run: bool = False,
    wait_seconds: WaitSeconds = 10.0,
) -> ToolResult:
    """Remember a conversation: memories are built from its messages as one session, in the background.

    Args:
        messages: The conversation, in order.
        session_time: When the conversation took place (ISO date-time); default: the first message's timestamp.
        builder: membuilder (an agent writes core, episodic, semantic and procedural memories; the default with a model) or raw (store the turns; the default without).
        dry_run: Only say what would change; change nothing.
        wait_seconds: How long to wait for the job to finish (0: return the queued job at once).
    """
    msgs = [m.model_dump(exclude_none=True) for m in messages]
    job = await ctx.memory.remember(msgs, namespace=ctx.namespace, session_time=session_time, builder=builder,
                                    dry_run=dry_run, wait=False)  # fmt: skip
    return await _finish(ctx, job, wait_seconds)


@tool
async def maintain(
    ctx: MemoryContext,
    max_tool_calls: Annotated[int, Field(ge=1, le=200)] = 30,
    question: Annotated[str | None, Field(max_length=2000)] = None,
    allow_mass_delete: bool = False,
    dry_run: bool = False,
    wait_seconds: WaitSeconds = 10.0,
) -> ToolResult:
    """Tidy the memory: an agent merges duplicates, fixes contradictions and deletes what is stale, in the background.

    Args:
        max_tool_calls: The agent's budget of memory operations.
        question: A question the memory should be ready to answer (focuses the agent).
        allow_mass_delete: Allow deleting more than the server's share of the memories.
        dry_run: Only say what would change; change nothing.
        wait_seconds: How long to wait for the job to finish (0: return the queued job at once).
    """
    job = await ctx.memory.maintain(namespace=ctx.namespace, max_tool_calls=max_tool_calls, question=question,
                                    allow_mass_delete=allow_mass_delete, dry_run=dry_run, wait=False)  # fmt: skip
    return await _finish(ctx, job, wait_seconds)


@tool
async def read_document(
    ctx: MemoryContext,
    document: Annotated[str, Field(min_length=1, max_length=2_000_000)],
    question: Annotated[str | None, Field(max_length=2000)] = None,
    title: Annotated[str | None, Field(max_length=200)] = None,
    dry_run: bool = False,
    wait_seconds: WaitSeconds = 10.0,
) -> ToolResult:
    """Read a document into memory: an agent reads it section by section and stores what it kept, in the background.

    Args:
        document: The text to read.
        question: A question to answer from the document (the answer comes back with the job).
        title: The document's title, stored with the memory.
        dry_run: Only say what would change; change nothing.
        wait_seconds: How long to wait for the job to finish (0: return the queued job at once).
    """
    job = await ctx.memory.memorize(document, namespace=ctx.namespace, question=question, title=title,
                                dry_run=dry_run, wait=False)  # fmt: skip
    return await _finish(ctx, job, wait_seconds)


@tool
async def job_status(ctx: MemoryContext, job_id: JobId, wait_seconds: WaitSeconds = 0.0) -> ToolResult:
    """A job's status, progress, and the changes it made (or would make).

    Args:
        job_id: The job's id.
        wait_seconds: How long to wait for it to finish (0: answer at once).
    """
    _own(ctx, job_id)
    return await _finish(ctx, await ctx.memory.job(job_id), wait_seconds)


@tool
async def undo_job(ctx: MemoryContext, job_id: JobId) -> ToolResult:
    """Revert every change a job made, as one change (refused, naming them, if its memories changed since).

    Args:
        job_id: The job's id.
    """
    _own(ctx, job_id)
    return _result(await ctx.memory.undo_job(job_id, actor=ctx.actor))


JOB_TOOLS = Toolset([remember, maintain, read_document, job_status, undo_job])
