"""The MCP server (``memrl serve mcp``): memrl's memory tools for any MCP client, on the official SDK.

    memrl serve mcp --db mem.db --namespace alice                               # stdio
    memrl serve mcp --db mem.db --namespace alice --transport http --port 8090 --token app=SECRET123:alice

Tools: MemUpdate's six (``search_memory``, ``manage_memory`` (create/update), ``delete_memory``,
``sample_memory``, ``merge_memory``, ``split_memory``) plus ``memory_history`` and ``undo_change``, all
acting on one namespace; and, when the memory has a job writer (``memrl serve mcp --llm``), the agent jobs
(:mod:`memrl.tools.jobs`): ``remember`` a conversation, ``maintain``, ``read_document``, ``job_status`` and
``undo_job``, which wait a few seconds at most and return the job's id to follow. Each is registered from the same typed function memrl's agents call
(:mod:`memrl.tools.memupdate`, :mod:`memrl.tools.service`): the SDK derives the input schema from that
function's signature (``Annotated`` bounds, ``Literal`` choices, docstring descriptions), and the call goes
through memrl's own :meth:`~memrl.tools.base.Tool.call`, so a bad call comes back as an error result the
model can act on and changes nothing. Results carry the tool's text and its structured ``data``.

Over HTTP (streamable HTTP at ``/mcp``) the shared plumbing of :mod:`memrl.server.http` applies: a bearer
token whose scope includes the namespace, request size and concurrency limits. On either transport the
embedding model starts loading on a thread as the server starts (:mod:`memrl.server.warmup`).
"""

import inspect
from typing import Annotated, Any, get_type_hints

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from memrl.memory import AsyncMemory
from memrl.memory.index import cache_scope
from memrl.memory.records import DEFAULT_TYPE
from memrl.server.guard import BrowserGuard, Policy
from memrl.server.http import HTTPError, Limits, LimitsMiddleware, Tokens, _send_json, error_body
from memrl.server.offload import StoreGate
from memrl.server.warmup import EmbedderLoad
from memrl.tools.base import Tool, ToolResult
from memrl.tools.jobs import JOB_TOOLS
from memrl.tools.memupdate import MEMUPDATE_TOOLS, MemoryContext
from memrl.tools.service import memory_history, undo_change

MCP_TOOLS: tuple[Tool, ...] = (*MEMUPDATE_TOOLS.tools, memory_history, undo_change)


def _adapter(t: Tool, ctx: MemoryContext, gate: StoreGate | None = None) -> Any:
    """An async function with ``t``'s own signature (minus the context) that runs ``t`` on ``ctx`` (through
    ``gate``, on a store thread holding the namespace, unless it is a job tool: the runner offloads its own
    store work)."""
    on_gate = gate is not None and t not in JOB_TOOLS.tools

    async def run(kwargs: dict[str, Any]) -> ToolResult:
        with cache_scope(ctx.namespace):  # what a tool embeds (sample_memory) stays in this namespace's cache
            return await t.call(ctx, kwargs)

    async def call(**kwargs: Any) -> CallToolResult:
        if (
            t.name == "manage_memory"
            and kwargs.get("operation") == "create"
            and not kwargs.get("memory_type")
        ):
            kwargs["memory_type"] = DEFAULT_TYPE  # the REST API's default, not the RL agent's (episodic)
        result = await (gate.run((ctx.namespace,), run, kwargs) if on_gate and gate else run(kwargs))
        structured = None if result.data is None else {"data": result.data}
        return CallToolResult(
            content=[TextContent(type="text", text=result.content)], structured_content=structured,
            is_error=not result.ok,
        )  # fmt: skip

    hints = get_type_hints(t.fn, include_extras=True)
    described = {n: f.description for n, f in t.model.model_fields.items()}
    if t.name == "manage_memory":
        described["memory_type"] = (described["memory_type"] or "").replace(
            "Default: episodic for a new memory", f"Default: {DEFAULT_TYPE} for a new memory"
        )
    params = [
        p.replace(
            annotation=Annotated[hints[p.name], Field(description=described[p.name])],
            kind=inspect.Parameter.KEYWORD_ONLY,
        )
        for p in list(inspect.signature(t.fn).parameters.values())[1:]
    ]
    call.__signature__ = inspect.Signature(params, return_annotation=CallToolResult)  # type: ignore[attr-defined]
    call.__name__ = t.name
    call.__doc__ = t.fn.__doc__
    return call


class _StrictServer(MCPServer):
    """The SDK's server, but each call is first validated by memrl's own tool model: the SDK ignores
    arguments a tool does not take (``namespace: "bob"`` was silently dropped and the write went to the
    served namespace); here an unknown or bad argument is an error result naming it, and nothing runs."""

    memrl_tools: dict[str, Tool]

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        t = self.memrl_tools.get(name)
        if t is not None:
            checked = t.validate(arguments)
            if isinstance(checked, ToolResult):
                return CallToolResult(content=[TextContent(type="text", text=checked.content)], is_error=True)
        return await super().call_tool(name, arguments, context)


def create_mcp(
    memory: AsyncMemory, namespace: str, *, actor: str = "mcp", gate: StoreGate | None = None
) -> MCPServer:
    """An MCP server whose tools act on ``namespace`` of ``memory`` (with the job tools if it has a writer);
    ``gate``: run the memory tools off the event loop (:mod:`memrl.server.offload`; MCP over HTTP)."""
    server = _StrictServer(
        "memrl",
        instructions=f"Long-term memory of namespace {namespace!r}: search it, add and update memories, delete, "
        "merge or split them, look at a sample, read a memory's history and undo a change.",
    )
    ctx = MemoryContext(memory, namespace, actor=actor)
    tools = (*MCP_TOOLS, *(JOB_TOOLS.tools if memory.writer is not None else ()))
    server.memrl_tools = {t.name: t for t in tools}
    # the embedding model, loaded on a thread as the server starts (memrl.server.warmup), not inside the
    # first tool call that embeds (7-10 s on a CPU); a call that embeds meanwhile waits for the load
    server.memrl_load = EmbedderLoad(memory.embedder)
    for t in tools:
        server.add_tool(
            _adapter(t, ctx, gate), name=t.name, description=t.description, structured_output=False
        )
    return server


class _BearerScope:
    """ASGI middleware: every HTTP request needs a token whose scope includes the served namespace."""

    def __init__(self, app: Any, tokens: Tokens, namespace: str) -> None:
        self.app, self.tokens, self.namespace = app, tokens, namespace

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            auth = dict(scope.get("headers") or []).get(b"authorization")
            try:
                self.tokens.principal(auth.decode("latin-1") if auth else None).check(self.namespace)
            except HTTPError as e:
                return await _send_json(send, e.status, error_body(e.kind, e.message), e.headers)
        await self.app(scope, receive, send)


def http_app(
    server: MCPServer,
    tokens: Tokens,
    namespace: str,
    limits: Limits | None = None,
    *,
    policy: Policy | None = None,
) -> Any:
    """The streamable-HTTP ASGI app (``/mcp``) behind the browser guard (Host and Origin checks, JSON
    bodies only), bearer tokens and limits."""
    server.memrl_load.start()
    app = server.streamable_http_app(streamable_http_path="/mcp")
    guarded = BrowserGuard(_BearerScope(app, tokens, namespace), policy or Policy.for_server("127.0.0.1"))
    return LimitsMiddleware(guarded, limits or Limits(), client_of=tokens.name_of)
