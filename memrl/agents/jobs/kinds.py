"""What each agent job does: the agents' own code (what ``memrl build``/``memrl eval`` run) on one namespace.

- ``remember``: a conversation (``messages`` with role, content, optional speaker and timestamp; an optional
  ``session_time``) becomes one session, built by MemBuilder (``agent="membuilder"``, the default with a model) or
  stored turn by turn by the ``raw`` builder (``agent="raw"``, no LLM: the default without a model).
- ``maintain``: one MemUpdate episode over the namespace, with a tool-call budget (and an optional target
  question).
- ``read``: MemAgent reads a document chunk by chunk; its final memory is stored as one memory; with a
  ``question`` its boxed answer comes back too.

Each runs on the namespace it is given, which the runner (:mod:`memrl.agents.jobs`) makes a scratch clone of
the job's namespace: every tool the model can reach takes its namespace from the job, never from the model.
:func:`run_kind` returns an :class:`Outcome`: a provider or store failure (after the back-end's own retries)
is ``failure`` (the job fails and its clone is discarded); a malformed answer goes through the agent's own
error path and is counted in ``stats["invalid"]``, with a ``skipped`` event saying why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memrl.agents.jobs.progress import Progress
from memrl.agents.memagent import MemAgent, MemAgentConfig, count_chunks
from memrl.agents.membuilder import MemBuilderAgent, MemBuilderConfig
from memrl.agents.memupdate import MemUpdateAgent, MemUpdateConfig
from memrl.agents.raw import RawConfig, store_session
from memrl.data.types import Conversation, Question, Session, Turn
from memrl.errors import ValidationError
from memrl.llm.base import LLM
from memrl.memory import AsyncMemory

KINDS = ("remember", "maintain", "read")


@dataclass
class Outcome:
    """What an agent did besides writing: counts, tokens, skipped actions, a failure, an answer."""

    stats: dict[str, Any] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=lambda: {"prompt": 0, "completion": 0})
    skipped: list[dict[str, Any]] = field(default_factory=list)
    failure: str | None = None
    answer: str | None = None


def _time(value: Any) -> datetime | None:
    if value in (None, ""):
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise ValidationError(f"not an ISO date-time: {value!r}", field="session_time") from None


def session_of(request: dict[str, Any], index: int) -> tuple[Session, tuple[str, ...]]:
    """The request's messages as session ``index`` (1-based), and the speakers in order of appearance."""
    messages = request.get("messages") or []
    when = request.get("session_time") or next(
        (m.get("timestamp") for m in messages if m.get("timestamp")), None
    )
    turns = tuple(
        Turn(f"S{index}:{i}", str(m.get("speaker") or m.get("role") or "user"), str(m["content"]), index, i)
        for i, m in enumerate(messages, 1)
    )
    speakers = tuple(dict.fromkeys(t.speaker for t in turns))
    return Session(index, _time(when), None if when is None else str(when), turns, id=f"S{index}"), speakers


def _skip(reason: str, **kw: Any) -> dict[str, Any]:
    return {"event": "skipped", "id": kw.get("id"), "type": kw.get("type"), "before": None,
            "after": kw.get("after"), "op": kw.get("op"), "reason": reason}  # fmt: skip


async def remember(
    llm: LLM | None, memory: AsyncMemory, ns: str, request: dict[str, Any], *, session_index: int
) -> Outcome:
    session, speakers = session_of(request, session_index)
    agent = request.get("agent") or ("raw" if llm is None else "membuilder")  # no model: the turns as said
    out = Outcome(stats={"agent": agent, "session": session_index, "turns": len(session.turns)})  # fmt: skip
    if agent == "raw":
        out.stats["stored"] = await store_session(memory, ns, session, RawConfig())
        return out
    if llm is None:
        raise ValidationError("this server has no LLM (--llm): only agent='raw' can remember", field="agent")
    conversation = Conversation(ns, speakers, (session,), (), "api")
    result = await MemBuilderAgent(llm, MemBuilderConfig()).build_session(memory, ns, conversation, session)
    out.tokens = {"prompt": result.prompt_tokens, "completion": result.completion_tokens}
    out.stats.update(llm_calls=result.llm_calls, applied=result.stats.get("actions_applied", 0),
                     proposed=result.stats.get("actions_proposed", 0))  # fmt: skip
    invalid = 0
    for traj in result.trajectories:
        mtype = traj.info.get("memory_type")
        if traj.failure is not None:  # a provider or store failure: not the model's doing
            out.failure = f"{mtype}: {traj.failure}"
        if traj.metrics.get("invalid"):
            invalid += 1
            out.skipped.append(_skip(f"unparsable answer: {traj.info.get('invalid_reason')}", type=mtype))
        for a in (traj.info.get("report") or {}).get("failed", []):
            invalid += 1
            out.skipped.append(_skip(a.get("error", "not applied"), type=mtype, id=a.get("id"),
                                     after=a.get("content"), op=a.get("operation")))  # fmt: skip
    out.stats["invalid"] = invalid
    return out


async def maintain(llm: LLM | None, memory: AsyncMemory, ns: str, request: dict[str, Any]) -> Outcome:
    if llm is None:
        raise ValidationError("this server has no LLM (--llm): maintain needs one", field="kind")
    cfg = MemUpdateConfig(max_tool_calls=int(request.get("max_tool_calls") or 30),
                          max_turns=int(request.get("max_turns") or 30), actor="job")  # fmt: skip
    question = None
    if request.get("question"):
        question = Question("q", str(request["question"]), (), "", None, (), ())
    conversation = Conversation(ns, tuple(request.get("speakers") or ()), (), (), "api")
    result = await MemUpdateAgent(llm, cfg).run(memory, ns, conversation, question=question)
    traj = result.trajectory
    out = Outcome(stats={"stop_reason": result.stop_reason, "tool_calls": int(traj.metrics.get("tool_calls", 0)),
                         "invalid": int(traj.metrics.get("invalid_calls", 0)),
                         "calls_by_tool": result.calls_by_tool},
                  tokens={"prompt": traj.prompt_tokens, "completion": traj.completion_tokens},
                  failure=traj.failure)  # fmt: skip
    for step in traj.steps:
        for r in step.tool_results:
            if r.get("kind") != "ok":
                out.skipped.append(_skip(r.get("error") or r.get("content", ""), op=r.get("name")))
    return out


async def read(llm: LLM | None, memory: AsyncMemory, ns: str, request: dict[str, Any]) -> Outcome:
    if llm is None:
        raise ValidationError("this server has no LLM (--llm): read needs one", field="kind")
    question = str(request.get("question") or "What should be remembered from this document?")
    cfg = _read_config(request)
    res = await MemAgent(llm, cfg).run(question, str(request["document"]), task_id=ns)
    traj = res.trajectory
    out = Outcome(stats={"chunks": res.chunks_read, "empty_memory_updates": traj.metrics.get("empty_memory_updates", 0)},
                  tokens={"prompt": traj.prompt_tokens, "completion": traj.completion_tokens},
                  failure=traj.failure)  # fmt: skip
    if traj.failure is not None:
        return out
    if request.get("question"):
        out.answer = res.answer
        out.stats["invalid"] = int(res.answer is None)
    if res.memory.strip() and res.memory != cfg.initial_memory:
        meta = {"source": "memagent", "title": request.get("title")}
        await memory.add(res.memory.strip()[: memory.store.max_content_chars], namespace=ns, type="semantic",
                         metadata={k: v for k, v in meta.items() if v}, actor="memagent")  # fmt: skip
    return out


def _read_config(request: dict[str, Any]) -> MemAgentConfig:
    return MemAgentConfig(chunk_tokens=int(request.get("chunk_tokens") or 1500),
                          memory_tokens=int(request.get("memory_tokens") or 512))  # fmt: skip


def expect(kind: str, llm: LLM | None, request: dict[str, Any], progress: Progress) -> None:
    """Set ``progress``'s totals: the sessions and model calls job ``kind`` will take (see
    :mod:`memrl.agents.jobs.progress`)."""
    if kind == "remember":
        progress.sessions_total = 1
        raw = request.get("agent") == "raw" or llm is None
        progress.steps_total = 0 if raw else len(MemBuilderConfig().types)
    elif kind == "read" and llm is not None:
        cfg = _read_config(request)
        progress.steps_total = count_chunks(str(request.get("document", "")), cfg.chunk_tokens, llm) + 1


async def run_kind(
    kind: str,
    llm: LLM | None,
    memory: AsyncMemory,
    ns: str,
    request: dict[str, Any],
    *,
    session_index: int = 1,
    progress: Progress | None = None,
) -> Outcome:
    """Run job ``kind`` on namespace ``ns`` (the job's scratch clone), counting its steps in ``progress``."""
    progress = progress or Progress(None)
    expect(kind, llm, request, progress)
    counted = progress.wrap(llm)
    if kind == "remember":
        return await remember(counted, memory, ns, request, session_index=session_index)
    if kind == "maintain":
        return await maintain(counted, memory, ns, request)
    if kind == "read":
        return await read(counted, memory, ns, request)
    raise ValidationError(f"unknown job kind {kind!r}; one of {', '.join(KINDS)}", field="kind")
