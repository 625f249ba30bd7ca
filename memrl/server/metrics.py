"""``GET /metrics`` of the memory service: Prometheus' text format, from a registry of the app's own.

    curl -H 'Authorization: Bearer ROOT_SECRET' http://127.0.0.1:8080/metrics

Shown only to a token for every namespace (``*``), as the run pages are: a tenant's token gets 403, and
the namespaces' names (the one label that carries them is ``memrl_store_items``) never reach it. Each app
has its own :class:`~prometheus_client.CollectorRegistry` (never the process-wide one), so two apps in one
process, and the tests, count apart. Without ``prometheus-client`` (the ``metrics`` extra) the route
answers 501 naming the extra. The metric names are in docs/observability.md.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from memrl import telemetry
from memrl.server.http import HTTPError, Principal, Tokens, bearer_dependency
from memrl.server.offload import ServedMemory

#: Seconds: a cached search takes milliseconds, an agent job with a remote model a minute or more.
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
JOB_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0)


def available() -> bool:
    """Whether prometheus-client (the ``metrics`` extra) can be imported."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return False
    return True


class Metrics:
    """The service's counters, in one registry of its own."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = r = CollectorRegistry()
        self.requests = Counter("memrl_http_requests", "HTTP requests, by route template, method and status",
                                ["route", "method", "status"], registry=r)  # fmt: skip
        self.latency = Histogram("memrl_http_request_duration_seconds", "HTTP request latency, by route template",
                                 ["route", "method"], buckets=REQUEST_BUCKETS, registry=r)  # fmt: skip
        self.jobs = Counter(
            "memrl_jobs", "agent jobs that ended, by kind and outcome", ["kind", "outcome"], registry=r
        )
        self.job_seconds = Histogram("memrl_job_duration_seconds", "agent job run time, by kind", ["kind"],
                                     buckets=JOB_BUCKETS, registry=r)  # fmt: skip
        self.llm_calls = Counter("memrl_llm_calls", "model calls of the agent jobs, by provider, model and outcome",
                                 ["provider", "model", "outcome"], registry=r)  # fmt: skip
        self.llm_tokens = Counter("memrl_llm_tokens", "tokens of the agent jobs' model calls, by model and type "
                                  "(input, output: gen_ai.token.type)", ["provider", "model", "type"], registry=r)  # fmt: skip
        self.errors = Counter("memrl_errors", "errors: 5xx answers (request), failed jobs (job), failed model "
                              "calls (llm)", ["where"], registry=r)  # fmt: skip
        self.namespaces = Gauge(
            "memrl_store_namespaces", "namespaces holding anything, at the scrape", registry=r
        )
        self.items = Gauge("memrl_store_items", "live memories per namespace, at the scrape (a count only)",
                           ["namespace"], registry=r)  # fmt: skip
        for where in ("request", "job", "llm"):
            self.errors.labels(where)  # present at 0, so a rate over them works from the first scrape

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route, method).observe(seconds)
        if status >= 500:
            self.errors.labels("request").inc()

    def llm_call(self, call: telemetry.LLMCall) -> None:
        self.llm_calls.labels(call.provider, call.model, "error" if call.error else "ok").inc()
        if call.error:
            self.errors.labels("llm").inc()
        self.llm_tokens.labels(call.provider, call.model, "input").inc(call.input_tokens)
        self.llm_tokens.labels(call.provider, call.model, "output").inc(call.output_tokens)

    def job(self, kind: str, outcome: str, seconds: float) -> None:
        self.jobs.labels(kind, outcome).inc()
        self.job_seconds.labels(kind).observe(seconds)
        if outcome == "failed":
            self.errors.labels("job").inc()

    def store(self, namespaces: list[dict[str, Any]]) -> None:
        """The store's size as it is now (the namespaces gone since the last scrape leave the gauge)."""
        self.items.clear()
        for n in namespaces:
            self.items.labels(n["name"]).set(n["items"])
        self.namespaces.set(len(namespaces))

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def metrics_router(metrics: Metrics | None, tokens: Tokens, served: ServedMemory) -> APIRouter:
    """``GET /metrics`` (``metrics`` None: 501, the extra is missing or metrics are off)."""
    auth = bearer_dependency(tokens)
    router = APIRouter()

    @router.get("/metrics", tags=["service"], summary="Prometheus metrics", include_in_schema=False)
    async def scrape(who: Principal = Depends(auth)) -> Response:
        if not who.admin:
            raise HTTPError(403, "metrics are shown only to a token for every namespace (*)", "forbidden")
        if metrics is None:
            why = "needs prometheus-client, the 'metrics' extra: pip install 'memrl[metrics]'"
            raise HTTPError(501, f"/metrics {why}" if not available() else "/metrics is off on this server",
                            "not_implemented")  # fmt: skip
        metrics.store(await served.namespaces())
        body, ctype = metrics.render()
        return Response(body, media_type=ctype)

    return router
