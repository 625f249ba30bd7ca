"""The memory REST API (``memrl serve memory``): a FastAPI app over one store file.

    memrl serve memory --db mem.db --port 8080 --token app=SECRET123:alice
    curl -H 'Authorization: Bearer SECRET123' -H 'Content-Type: application/json' \\
         -d '{"content": "Alice lives in Lisbon"}' http://127.0.0.1:8080/v1/namespaces/alice/memories

Routes (all under ``/v1``, JSON in and out; the OpenAPI document is ``/openapi.json``, its reference page
``/docs``: :mod:`memrl.server.apidocs`):

| route | operation |
|---|---|
| ``GET /namespaces`` | namespaces the token may see, with item counts |
| ``POST /namespaces/{ns}/memories`` | add (201) |
| ``GET /namespaces/{ns}/memories`` | list (``?types=&include_deleted=&limit=&offset=``) |
| ``POST /namespaces/{ns}/search`` | search; hits with fused, dense and BM25 scores and ranks (``as_of``, ``include_history``) |
| ``GET/PATCH/DELETE /namespaces/{ns}/memories/{id}`` | get (``?as_of=&include_history=``), update, delete (soft, ``?reason=``) |
| ``POST /namespaces/{ns}/memories/{id}/restore`` | restore a deleted memory |
| ``GET /namespaces/{ns}/memories/{id}/history``, ``GET /namespaces/{ns}/history`` | history |
| ``POST /namespaces/{ns}/memories/{id}/undo``, ``POST /namespaces/{ns}/undo`` | undo |
| ``POST /namespaces/{ns}/clone`` | copy to ``{"target": ...}`` (the token needs both) |
| ``GET /namespaces/{ns}/export``, ``POST /namespaces/{ns}/import`` | JSONL with history, lossless |
| ``GET /namespaces/{ns}/core`` | the core memory block |

The embedder loads as the app starts, on a thread (:mod:`memrl.server.warmup`): ``/health`` says
``loading`` meanwhile, and requests that embed wait for it.

Every route's store and search work runs off the event loop, on the store gate's threads
(:mod:`memrl.server.offload`: one namespace at a time, a share per token, a deadline), so ``/health`` and
other tenants answer while one tenant's searches or a locked store take their time.

The request model of each memory operation is derived from the typed tool that implements it
(:mod:`memrl.tools.service`, and MemUpdate's ``delete_memory``): the tool's own pydantic model minus the
fields the path carries. So the OpenAPI schemas, the validation, the MCP tool schemas and the schemas
models see all come from one signature per operation.
"""

import inspect
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated, Any
from urllib.parse import quote

import pydantic
from fastapi import APIRouter, Body, Depends, FastAPI, Path, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import AfterValidator
from starlette.concurrency import run_in_threadpool

from memrl.agents.jobs import JobRunner
from memrl.memory import AsyncMemory
from memrl.memory.analysis import tokens as tokens_of
from memrl.memory.index import cache_scope
from memrl.memory.records import Name, check
from memrl.memory.store import ImportReader
from memrl.server.apidocs import add_docs_routes
from memrl.server.guard import BrowserGuard, CsrfTokens, Policy
from memrl.server.http import (
    HTTPError,
    Limits,
    LimitsMiddleware,
    Principal,
    Tokens,
    bearer_dependency,
    install_error_handlers,
    json_bytes,
    json_response_class,
)
from memrl.server.limits import Waits
from memrl.server.metrics import metrics_router
from memrl.server.observe import ObserveConfig, Observer
from memrl.server.offload import ServedMemory, StoreGate
from memrl.server.ui.pages import SCRIPT_HASHES
from memrl.server.warmup import EmbedderLoad
from memrl.tools.base import Tool, ToolResult
from memrl.tools.memupdate import MemoryContext, delete_memory
from memrl.tools.service import (
    add_memory,
    get_memory,
    list_memories,
    memory_history,
    restore_memory,
    search_memories,
    undo_change,
    update_memory,
)  # fmt: skip

JSONResponse = json_response_class()


_PATH_NAME = Name(10_000)


def no_control(value: str) -> str:
    """Path names are checked like stored names (:mod:`memrl.memory.records.models`): no control characters."""
    return check("name", value, _PATH_NAME)


NamespacePath = Annotated[
    str,
    Path(min_length=1, max_length=200, description="the namespace (user or episode)"),
    AfterValidator(no_control),
]
MemoryIdPath = Annotated[
    str,
    Path(min_length=1, max_length=64, description="the memory's id (may hold '/')"),
    AfterValidator(no_control),
]


@dataclass(frozen=True)
class Route:
    """One REST route backed by a typed tool: which fields come from the path, and which are fixed."""

    method: str
    path: str
    tool: Tool
    status: int = 200
    fixed: dict[str, Any] = field(default_factory=dict)
    summary: str = ""

    @property
    def path_fields(self) -> list[str]:
        return [p for p in ("memory_id",) if "{" + p + "}" in self.path or "{" + p + ":path}" in self.path]


ROUTES = (
    Route("POST", "/namespaces/{namespace}/memories", add_memory, 201, summary="Add a memory"),
    Route("GET", "/namespaces/{namespace}/memories", list_memories, summary="List memories"),
    Route("POST", "/namespaces/{namespace}/search", search_memories, summary="Search memories"),
    # An id may hold "/" (the routes take the rest of the path): the routes with a suffix come first.
    Route(
        "POST", "/namespaces/{namespace}/memories/{memory_id:path}/restore", restore_memory, summary="Restore"
    ),
    Route(
        "GET", "/namespaces/{namespace}/memories/{memory_id:path}/history", memory_history, summary="History"
    ),
    Route(
        "POST", "/namespaces/{namespace}/memories/{memory_id:path}/undo", undo_change, summary="Undo a change"
    ),
    Route("GET", "/namespaces/{namespace}/memories/{memory_id:path}", get_memory, summary="Get a memory"),
    Route(
        "PATCH", "/namespaces/{namespace}/memories/{memory_id:path}", update_memory, summary="Update a memory"
    ),
    Route(
        "DELETE",
        "/namespaces/{namespace}/memories/{memory_id:path}",
        delete_memory,
        summary="Delete a memory",
    ),
    Route(
        "GET",
        "/namespaces/{namespace}/history",
        memory_history,
        fixed={"memory_id": None},
        summary="Namespace history",
    ),  # fmt: skip
    Route(
        "POST",
        "/namespaces/{namespace}/undo",
        undo_change,
        fixed={"memory_id": None},
        summary="Undo the namespace's latest change",
    ),  # fmt: skip
)


def content_disposition(filename: str) -> str:
    """An attachment header for any file name: an ASCII fallback plus the UTF-8 name (RFC 6266/5987), so a
    namespace such as 李 or one with quotes exports (a raw non-Latin-1 header value cannot be sent)."""
    fallback = "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in filename)
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


def request_model(route: Route) -> type[pydantic.BaseModel] | None:
    """The tool's argument model without the fields the path or the route fixes (None if nothing is left)."""
    drop = {*route.path_fields, *route.fixed}
    fields = {n: (f.annotation, f) for n, f in route.tool.model.model_fields.items() if n not in drop}
    if not fields:
        return None
    name = "".join(w.title() for w in route.tool.name.split("_")) + (
        "Query" if route.method in ("GET", "DELETE") else "Request"
    )
    return pydantic.create_model(name, __config__=pydantic.ConfigDict(extra="forbid"), **fields)


class CloneRequest(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    target: Annotated[str, pydantic.Field(min_length=1, max_length=200, description="the new namespace")]
    overwrite: bool = pydantic.Field(False, description="replace the target if it exists")


async def run_tool(
    memory: AsyncMemory,
    tool: Tool,
    ns: str,
    who: Principal,
    values: dict[str, Any],
    gate: StoreGate | None = None,
) -> ToolResult:
    """Validate ``values`` with the tool's own model and run it (through ``gate`` when given: on a store
    thread, holding ``ns``); memrl errors propagate (mapped to 4xx)."""
    kwargs = tool.validate(values)
    if isinstance(kwargs, ToolResult):
        raise HTTPError(422, kwargs.error or kwargs.content)

    async def call() -> ToolResult:
        with cache_scope(ns):  # whatever the tool embeds uses this namespace's cache
            return await tool.fn(MemoryContext(memory, ns, actor=f"api:{who.name}"), **kwargs)

    return await call() if gate is None else await gate.run((ns,), call)


#: The tools whose routes embed (the content or the query): they wait for the embedder's load first.
_EMBEDS = frozenset({"add_memory", "update_memory", "search_memories"})


def _endpoint(route: Route, memory: AsyncMemory, auth: Any, gate: StoreGate | None, ready: Any = None) -> Any:
    model = request_model(route)
    body = route.method in ("POST", "PATCH")

    async def endpoint(**kw: Any) -> JSONResponse:
        who: Principal = kw.pop("who")
        ns = kw.pop("namespace")
        who.check(ns)
        args = kw.pop("args", None)
        values = {} if args is None else args.model_dump(exclude_unset=True)
        values.update(kw, **route.fixed)
        if ready is not None and route.tool.name in _EMBEDS and values.get("mode") != "bm25":
            await ready()  # the embedding model's load (memrl.server.warmup): the store deadline starts after
        result = await run_tool(memory, route.tool, ns, who, values, gate)
        data = result.data
        if route.tool is delete_memory:
            get = memory.get if gate is None else ServedMemory(memory, gate).get
            data = (await get(values["memory_id"], namespace=ns, include_deleted=True)).to_dict()
        return JSONResponse(data, status_code=route.status)

    params = [inspect.Parameter("namespace", inspect.Parameter.KEYWORD_ONLY, annotation=NamespacePath)]
    if "memory_id" in route.path_fields:
        params.append(inspect.Parameter("memory_id", inspect.Parameter.KEYWORD_ONLY, annotation=MemoryIdPath))
    if model is not None:
        where = Body() if body else Query()
        params.append(
            inspect.Parameter("args", inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[model, where])
        )
    params.append(
        inspect.Parameter("who", inspect.Parameter.KEYWORD_ONLY, annotation=Principal, default=Depends(auth))
    )
    endpoint.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    endpoint.__name__ = route.tool.name + ("_ns" if route.fixed else "")
    return endpoint


def memory_router(
    memory: AsyncMemory, tokens: Tokens, gate: StoreGate | None = None, ready: Any = None
) -> APIRouter:
    """Every ``/v1`` route of the memory API (their store work through ``gate`` when given; the routes that
    embed await ``ready()`` first: :meth:`memrl.server.warmup.EmbedderLoad.wait`)."""
    auth = bearer_dependency(tokens)
    served = memory if gate is None else ServedMemory(memory, gate)
    router = APIRouter(prefix="/v1")
    for r in ROUTES:
        router.add_api_route(
            r.path, _endpoint(r, memory, auth, gate, ready), methods=[r.method], status_code=r.status, summary=r.summary,
            description=r.tool.description, tags=["memories"],
        )  # fmt: skip

    @router.get("/namespaces", tags=["namespaces"], summary="List namespaces")
    async def namespaces(who: Principal = Depends(auth)) -> list[dict[str, Any]]:
        """Namespaces holding anything, with live item counts: only those the token may access."""
        return [n for n in await served.namespaces() if who.allows(n["name"])]

    @router.post("/namespaces/{namespace}/clone", tags=["namespaces"], status_code=201, summary="Clone")
    async def clone(
        namespace: NamespacePath, req: CloneRequest, who: Principal = Depends(auth)
    ) -> dict[str, Any]:
        """Copy a namespace's live items and core memory to ``target`` (ids kept, history starts empty)."""
        who.check(namespace)
        who.check(req.target)
        n = await served.clone(namespace, req.target, overwrite=req.overwrite)
        return {"source": namespace, "target": req.target, "items": n}

    @router.get("/namespaces/{namespace}/core", tags=["namespaces"], summary="Core memory")
    async def core(namespace: NamespacePath, who: Principal = Depends(auth)) -> dict[str, Any]:
        who.check(namespace)
        return {"namespace": namespace, "content": await served.core(namespace=namespace)}

    @router.get("/namespaces/{namespace}/export", tags=["namespaces"], summary="Export (JSONL)")
    async def export(namespace: NamespacePath, who: Principal = Depends(auth)) -> StreamingResponse:
        """The namespace as JSON lines: items (deleted ones too), core memory and the whole history."""
        who.check(namespace)
        lines = await served.export_lines(namespace=namespace)

        async def stream() -> AsyncIterator[bytes]:
            for line in lines:
                yield json_bytes(line, compact=False) + b"\n"

        headers = {"Content-Disposition": content_disposition(f"{namespace}.jsonl")}
        return StreamingResponse(stream(), media_type="application/x-ndjson", headers=headers)

    @router.post(
        "/namespaces/{namespace}/import", tags=["namespaces"], status_code=201, summary="Import (JSONL)"
    )
    async def import_(
        namespace: NamespacePath, request: Request, overwrite: bool = False, who: Principal = Depends(auth)
    ) -> dict[str, Any]:
        """Import a JSONL export (the request body, ``Content-Type: application/x-ndjson``) into this
        namespace, atomically. The body is read and validated line by line as it arrives; a bad line gets
        422 with a report (``error.lines``: line number, kind, field, message) and nothing is written."""
        who.check(namespace)
        reader = ImportReader(memory.store)
        try:
            # Parsing and the one write transaction run in worker threads: the event loop (every other
            # request, /health) does not wait for a large import. Chunks are handed over ~1 MB at a time.
            pending: list[bytes] = []
            size = 0
            async for chunk in request.stream():
                pending.append(chunk)
                size += len(chunk)
                if size >= 1 << 20:
                    await run_in_threadpool(reader.feed_bytes, b"".join(pending))
                    pending, size = [], 0
            if pending:
                await run_in_threadpool(reader.feed_bytes, b"".join(pending))

            def write() -> dict[str, Any]:
                counts = reader.write(namespace, overwrite=overwrite)
                memory.index.forget(namespace)
                return counts

            return await _on_store(gate, namespace, write)
        finally:
            reader.close()

    return router


async def _on_store(gate: StoreGate | None, ns: str, fn: Any) -> Any:
    """``fn()`` through ``gate`` on namespace ``ns``, or in a worker thread without one."""
    return await (run_in_threadpool(fn) if gate is None else gate.run((ns,), fn))


def create_app(
    memory: AsyncMemory,
    tokens: Tokens | None = None,
    limits: Limits | None = None,
    *,
    runs: list[str] | None = None,
    ui: bool = True,
    policy: Policy | None = None,
    jobs: JobRunner | None = None,
    observe: ObserveConfig | None = None,
) -> Any:
    """The whole memory service: the ``/v1`` API, ``/health``, and (``ui``) the web memory browser at ``/``,
    behind :class:`~memrl.server.guard.BrowserGuard` with ``policy`` (default: a loopback server's).
    ``jobs``: the runner of the agent jobs (:mod:`memrl.server.jobs_api`; default: the memory's own writer,
    else one without an LLM, which remembers with ``agent="raw"`` only). ``observe``: the JSON lines and
    metrics (:mod:`memrl.server.observe`; default: both on)."""
    from memrl import __version__
    from memrl.server.jobs_api import jobs_router

    tokens = tokens or Tokens()
    limits = limits or Limits()
    app = FastAPI(
        title="memrl memory API", version=__version__, docs_url=None, redoc_url=None,
        description="Long-term memory with hybrid search, history and undo. Bearer tokens are scoped to namespaces.",
        default_response_class=JSONResponse,
    )  # fmt: skip
    install_error_handlers(app)
    load = EmbedderLoad(memory.embedder, limits.embedder_wait)  # loads on a thread as the app starts
    gate = StoreGate(limits.store_workers, limits.store_timeout, slow=load.slow)
    if getattr(memory, "max_as_of_changes", None) is None:  # the server bounds what one as_of may rebuild
        memory.max_as_of_changes = limits.max_as_of_changes
    app.include_router(memory_router(memory, tokens, gate, load.wait))
    jobs = jobs or memory.writer or JobRunner(memory, None)
    served = ServedMemory(memory, gate, load.wait)
    observer = Observer(observe, tokens)
    app.include_router(metrics_router(observer.metrics, tokens, served))
    if hasattr(jobs, "watch"):  # a JobRunner: each job's end and model calls, counted and logged
        jobs.watch.add(observer)
    app.include_router(jobs_router(jobs, tokens, served, Waits(limits.max_waits_per_token, limits.max_waits)))
    app.router.add_event_handler("startup", load.start)
    app.router.add_event_handler("startup", jobs.start)  # interrupted jobs failed, queued ones resumed
    app.router.add_event_handler("shutdown", jobs.close)
    app.router.add_event_handler("shutdown", gate.close)

    add_docs_routes(app)  # the API reference at /docs, from files the server serves (works offline)

    @app.get("/health", tags=["service"])
    async def health() -> dict[str, Any]:
        """Always answers at once: it takes no place among the requests in flight and touches no store.
        ``status``: ``loading`` while the embedding model loads (requests that embed wait for it), ``ok``
        once it is loaded, ``degraded`` when its load failed (``embedder_error`` says why)."""
        state = load.state
        status = {"ready": "ok", "loading": "loading"}.get(state, "degraded")
        return {"status": status, "auth": tokens.enabled, **load.health()}

    if ui:
        from memrl.server.ui import ui_router

        app.include_router(ui_router(served, tokens, runs or [], CsrfTokens(), jobs, notice=load.notice))
    app.state.memory = memory
    app.state.jobs = jobs
    app.state.gate = gate
    app.state.embedder_load = load
    tokens_of("warm up")  # load the stemmer now, not inside the first search requests
    guarded = BrowserGuard(app, policy or Policy.for_server("127.0.0.1"), script_hashes=SCRIPT_HASHES)
    return observer.wrap(LimitsMiddleware(guarded, limits, client_of=tokens.name_of), app)
