"""The memory operations an agent framework's tools are built from: the typed tools memrl's REST API and MCP
server serve, bound to one namespace.

Each operation is written once, as a typed function (:mod:`memrl.tools.service`: add, search, get, list,
update, restore, history, undo; MemUpdate's ``delete_memory``; the agent jobs of :mod:`memrl.tools.jobs`:
``remember``, ``maintain``, ``read_document``, ``job_status``, ``undo_job``, given when the memory has a
job writer). Its name, description and JSON schema (:attr:`memrl.tools.base.Tool.parameters`) are what a
framework shows the model, and a call goes through :meth:`memrl.tools.base.Tool.call`: validated by the
same model the REST API validates with, a bad call answered with an error text the model can act on.
The LangChain tools (:mod:`.langchain`) and the OpenAI Agents SDK's (:mod:`.openai_agents`) are thin
wrappers of :class:`BoundTool`.

    tools = bind(Memory("memrl.db", writer=job_writer()), "alice", names=["search_memories", "remember"])
    result = tools[0].call({"query": "where does Alice live"})      # a ToolResult: .content, .data, .ok
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memrl.errors import ValidationError
from memrl.integrations.running import Runner
from memrl.memory.index import cache_scope
from memrl.tools.base import Tool, ToolResult
from memrl.tools.jobs import JOB_TOOLS
from memrl.tools.memupdate import MemoryContext, delete_memory
from memrl.tools.service import SERVICE_TOOLS

__all__ = ["MEMORY_TOOLS", "BoundTool", "bind"]

#: The operations of the REST API's memory routes, in its order.
MEMORY_TOOLS: tuple[Tool, ...] = (*SERVICE_TOOLS.tools, delete_memory)


class BoundTool:
    """One tool on one namespace of a memory: ``call`` (blocking) and ``acall`` (async) take the model's
    arguments (a dict or its JSON text) and give the :class:`~memrl.tools.base.ToolResult`."""

    def __init__(self, tool: Tool, ctx: MemoryContext, runner: Runner) -> None:
        self.tool, self.ctx, self.runner = tool, ctx, runner
        self.name, self.description, self.parameters = tool.name, tool.description, tool.parameters

    async def _call(self, arguments: dict[str, Any] | str | None) -> ToolResult:
        with cache_scope(self.ctx.namespace):  # what a tool embeds stays in this namespace's cache
            return await self.tool.call(self.ctx, arguments)

    async def acall(self, arguments: dict[str, Any] | str | None) -> ToolResult:
        return await self.runner.run(lambda: self._call(arguments))

    def call(self, arguments: dict[str, Any] | str | None) -> ToolResult:
        return self.runner.sync(lambda: self._call(arguments))

    def __repr__(self) -> str:
        return f"BoundTool({self.name} on {self.ctx.namespace!r})"


def bind(
    memory: Any, namespace: str, *, names: Sequence[str] | None = None, actor: str = "agent"
) -> list[BoundTool]:
    """The memory tools on ``namespace`` of ``memory`` (a ``Memory`` or ``AsyncMemory``): every operation of
    :data:`MEMORY_TOOLS`, and the job tools when the memory has a writer, or only ``names`` (in that
    order). ``actor``: who the history says made the changes."""
    runner = Runner(memory)
    ns = runner.aio.ns(namespace)  # memrl's rule for namespace names: a bad one is refused here
    jobs = JOB_TOOLS.tools if runner.aio.writer is not None else ()
    available = {t.name: t for t in (*MEMORY_TOOLS, *jobs)}
    if names is None:
        chosen = list(available.values())
    else:
        missing = [n for n in names if n not in available]
        if missing:
            hint = (
                " (the job tools need a memory with a writer: Memory(..., writer=job_writer()))"
                if any(n in JOB_TOOLS.by_name for n in missing)
                else ""
            )
            raise ValidationError(f"no memory tool named {missing}; available: {', '.join(available)}{hint}")
        chosen = [available[n] for n in names]
    ctx = MemoryContext(runner.aio, ns, actor=actor)
    return [BoundTool(t, ctx, runner) for t in chosen]
