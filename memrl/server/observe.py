"""What a memory service tells its operator: a JSON line per request and per job, Prometheus metrics, and an
OpenTelemetry span per request (docs/observability.md).

    memrl serve memory --token root=ROOT_SECRET:*                 # JSON lines on stderr, /metrics for root
    memrl serve memory --no-access-log                            # no lines
    OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318 memrl serve memory   # traces too (memrl[otel])

:class:`ObserveMiddleware` is the outermost ASGI layer, so it sees every answer, the limits' 413/429/503 and
the guard's 421/403 included. Requests are labelled by their route template (``/v1/namespaces/{namespace}/search``),
never by the raw path; a path no route matches is ``unmatched``. A request line names the namespace of its
path: the log is the operator's, as ``/metrics`` is. :class:`Observer` is also the job runner's listener
(:mod:`memrl.agents.jobs.watch`): each job's end is counted by kind and outcome and logged, with its model
calls and tokens.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TextIO

from memrl import telemetry
from memrl.config import option
from memrl.memory.jobs import Job
from memrl.server.http import Tokens
from memrl.server.metrics import Metrics, available


@dataclass(frozen=True)
class ObserveConfig:
    """What a memory service reports (``memrl serve memory`` flags of the same names)."""

    access_log: bool = option(
        True, "one JSON line per request and per job, on stderr (--no-access-log: none)"
    )
    metrics: bool = option(
        True, "count requests, jobs and model calls for GET /metrics (needs memrl[metrics])"
    )
    log_stream: TextIO | None = option(None, "where the JSON lines go (None: stderr at the time of writing)")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Observer:
    """One app's metrics (None without prometheus-client or with ``metrics`` off) and JSON lines."""

    def __init__(self, config: ObserveConfig | None = None, tokens: Tokens | None = None) -> None:
        self.config = config or ObserveConfig()
        self.tokens = tokens or Tokens()
        self.metrics = Metrics() if self.config.metrics and available() else None
        self._lock = threading.Lock()
        self._usage: dict[str, list[int]] = {}  # running job -> [model calls, input tokens, output tokens]

    def log(self, record: dict[str, Any]) -> None:
        if not self.config.access_log:
            return
        line = json.dumps({"ts": _now(), **record}, ensure_ascii=False, default=str)
        stream = self.config.log_stream or sys.stderr
        with self._lock:
            stream.write(line + "\n")
            stream.flush()

    # ---- the job runner's listener (memrl.agents.jobs.watch.JobListener)
    def llm_call(self, job: Job, call: telemetry.LLMCall) -> None:
        with self._lock:
            usage = self._usage.setdefault(job.id, [0, 0, 0])
            usage[0] += 1
            usage[1] += call.input_tokens
            usage[2] += call.output_tokens
        if self.metrics is not None:
            self.metrics.llm_call(call)

    def job_ended(self, job: Job, outcome: str, seconds: float) -> None:
        with self._lock:
            calls, tokens_in, tokens_out = self._usage.pop(job.id, [0, 0, 0])
        if self.metrics is not None:
            self.metrics.job(job.kind, outcome, seconds)
        self.log({"event": "job", "job_id": job.id, "kind": job.kind, "namespace": job.namespace,
                  "outcome": outcome, "dry_run": job.dry_run, "duration_ms": round(seconds * 1000, 3),
                  "llm_calls": calls, "input_tokens": tokens_in, "output_tokens": tokens_out})  # fmt: skip

    def wrap(self, asgi: Any, app: Any) -> ObserveMiddleware:
        """``asgi`` (the app behind its middleware) observed; ``app``: the FastAPI app, whose routes name the
        requests its middleware answered before routing."""
        return ObserveMiddleware(asgi, self, app)


def route_of(scope: dict, app: Any) -> tuple[str, str | None]:
    """(route template, the path's namespace) of a request: the route that ran, else the one that would have
    (a request the limits or the guard refused), else ``unmatched``. The template is the route's
    ``path_format`` (``/v1/namespaces/{namespace}/memories/{memory_id}``: no converter)."""
    route = scope.get("route")
    params = scope.get("path_params") or {}
    if route is None and app is not None:
        from starlette.routing import Match

        for candidate in _routes(app.router.routes):
            match, child = candidate.matches(scope)
            if match == Match.FULL:
                route, params = candidate, child.get("path_params") or {}
                break
    path = getattr(route, "path_format", None) or getattr(route, "path", None)
    return (path or "unmatched"), params.get("namespace")


def _routes(routes: list[Any]) -> Any:
    """Every route of an app, those of included routers too (FastAPI 0.16x keeps them nested)."""
    for route in routes:
        nested = getattr(route, "effective_route_contexts", None)
        if nested is not None:
            yield from nested()
        else:
            yield route


class ObserveMiddleware:
    """ASGI middleware: a span, a count, a latency and a JSON line per HTTP request (module docstring)."""

    def __init__(self, app: Any, observer: Observer, fastapi_app: Any = None) -> None:
        self.app, self.observer, self.fastapi_app = app, observer, fastapi_app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        method = scope.get("method", "GET")
        status = [500]  # what a request that raised before answering gets

        async def watched(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        start = time.monotonic()
        attrs = {"http.request.method": method, "url.scheme": scope.get("scheme", "http")}
        try:
            with telemetry.span(method, attrs, kind="server") as span:
                try:
                    await self.app(scope, receive, watched)
                finally:
                    route, _ = route_of(scope, self.fastapi_app)
                    span.update_name(f"{method} {route}")
                    span.set_attribute("http.route", route)
                    span.set_attribute("http.response.status_code", status[0])
                    if status[0] >= 500:
                        span.set_attribute("error.type", str(status[0]))
        finally:
            self._record(scope, method, status[0], time.monotonic() - start)

    def _record(self, scope: dict, method: str, status: int, seconds: float) -> None:
        route, namespace = route_of(scope, self.fastapi_app)
        observer = self.observer
        if observer.metrics is not None:
            observer.metrics.request(route, method, status, seconds)
        if observer.config.access_log:
            auth = dict(scope.get("headers") or []).get(b"authorization")
            token = observer.tokens.name_of(auth.decode("latin-1") if auth is not None else None)
            observer.log({"event": "request", "method": method, "route": route, "status": status,
                          "namespace": namespace, "token": token, "duration_ms": round(seconds * 1000, 3)})  # fmt: skip
