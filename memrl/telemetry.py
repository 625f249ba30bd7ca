"""Traces for every layer, at no cost when nobody listens: spans named by OpenTelemetry's GenAI conventions.

    from memrl import telemetry
    with telemetry.span("search_memory alice", {telemetry.OPERATION: "search_memory"}) as s:
        s.set_attribute("memrl.search.hits", 3)

:func:`span` is a no-op (one dictionary look-up, no import) unless OpenTelemetry's API is imported and a real
tracer provider is set: ``opentelemetry.trace.set_tracer_provider(...)`` (programmatically, or by
:func:`configure_from_env` from the standard ``OTEL_*`` variables, which ``memrl serve memory`` calls),
or :func:`use` for memrl alone. memrl never imports OpenTelemetry for its own sake: ``pip install
'memrl[otel]'`` adds it.

Names and attributes follow the OpenTelemetry GenAI semantic conventions (development status):

- model calls (``memrl.llm``): span ``chat {gen_ai.request.model}``, kind CLIENT, ``gen_ai.operation.name``
  ``chat``, ``gen_ai.provider.name``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` /
  ``output_tokens`` (https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/, "Inference");
- agent jobs (``memrl.agents``): ``invoke_agent {gen_ai.agent.name}``, ``gen_ai.operation.name``
  ``invoke_agent``, ``gen_ai.agent.name`` (membuilder, memupdate, memagent, raw);
- memory operations (``memrl.memory``): ``create_memory``, ``update_memory``, ``delete_memory``,
  ``search_memory`` with ``gen_ai.memory.store.id`` (memrl's namespace) and ``gen_ai.memory.record.id``, as
  the memory conventions merged into open-telemetry/semantic-conventions-genai (PR #140, May 2026, from
  open-telemetry/semantic-conventions#3250: "gen-ai: semantic conventions for memory operations"). The
  opt-in content attributes (``gen_ai.memory.query.text``, ``gen_ai.memory.records``) are never set: a
  trace carries no memory's text;
- search stages (``memrl.search.embed|dense|bm25|rank|fetch``) are memrl's own, children of
  ``search_memory``.

:data:`LLM_CALLS` is where a model call's usage goes besides its span: a job runner sets it for the calls
of its job (a server counts them per model), so this module needs nothing of the layers above it.
"""

from __future__ import annotations

import contextvars
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
AGENT_NAME = "gen_ai.agent.name"
STORE_ID = "gen_ai.memory.store.id"
RECORD_ID = "gen_ai.memory.record.id"


@dataclass(frozen=True)
class LLMCall:
    """One model call as :data:`LLM_CALLS` hears of it (``error``: the exception's class name)."""

    provider: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    error: str | None = None


#: Who hears of the model calls made in this context (None: nobody). Set by whoever owns the work (a job).
LLM_CALLS: contextvars.ContextVar[Callable[[LLMCall], None] | None] = contextvars.ContextVar(
    "memrl_llm_calls", default=None
)


def llm_called(call: LLMCall) -> None:
    """Tell :data:`LLM_CALLS`'s listener of ``call`` (if any)."""
    listener = LLM_CALLS.get()
    if listener is not None:
        listener(call)


class _NoSpan:
    """What :func:`span` gives when nothing is traced: every method does nothing."""

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def update_name(self, name: str) -> None:
        return None

    def is_recording(self) -> bool:
        return False


NO_SPAN = _NoSpan()
_own: list[Any] = []  # the provider use() set, if any
_tracers: dict[int, Any] = {}  # id(provider) -> memrl's tracer from it


def use(provider: Any | None) -> None:
    """Trace memrl with ``provider`` (an OpenTelemetry ``TracerProvider``), whatever the global one is;
    ``None`` goes back to the global provider."""
    _own[:] = [] if provider is None else [provider]


def tracer() -> Any | None:
    """memrl's tracer, or None when no real tracer provider is set (then nothing is traced)."""
    if _own:
        provider = _own[0]
    else:
        trace = sys.modules.get("opentelemetry.trace")  # never imported here: no listener, no cost
        if trace is None:
            return None
        provider = trace.get_tracer_provider()
        if type(provider).__name__ in ("ProxyTracerProvider", "NoOpTracerProvider"):
            return None
    found = _tracers.get(id(provider))
    if found is None or found[0] is not provider:
        found = _tracers[id(provider)] = (provider, provider.get_tracer("memrl"))
    return found[1]


def span(name: str, attributes: dict[str, Any] | None = None, kind: str = "internal") -> Any:
    """A context manager giving the current span (a no-op object when nothing is traced). ``kind``:
    internal, server or client. An exception leaving it is recorded on the span, which ends in error."""
    t = tracer()
    if t is None:
        return NO_SPAN
    from opentelemetry.trace import SpanKind

    clean = {k: v for k, v in (attributes or {}).items() if v is not None}
    return t.start_as_current_span(name, kind=getattr(SpanKind, kind.upper()), attributes=clean)


def memory_span(operation: str, namespace: str, attributes: dict[str, Any] | None = None) -> Any:
    """The span of a memory operation (``search_memory``, ...): ``{operation} {namespace}``, as the GenAI
    conventions name a retrieval ``{gen_ai.operation.name} {gen_ai.data_source.id}``, kind CLIENT."""
    if tracer() is None:
        return NO_SPAN
    attrs = {OPERATION: operation, STORE_ID: namespace, **(attributes or {})}
    return span(f"{operation} {namespace}", attrs, kind="client")


def configure_from_env(environ: dict[str, str] | None = None) -> Any | None:
    """Set a global tracer provider from the standard variables, when the SDK is installed and an exporter
    is named: ``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``, ``none``; comma-separated), or an
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (then ``otlp``). The OTLP
    exporter reads its own variables (endpoint, headers, ``OTEL_EXPORTER_OTLP_PROTOCOL``), the resource
    ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` (default service name ``memrl``). Returns the
    provider, or None (no exporter named, ``OTEL_SDK_DISABLED=true``, or the SDK is missing)."""
    env = os.environ if environ is None else environ
    names = [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    if not names and (
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        names = ["otlp"]
    names = [n for n in names if n != "none"]
    if not names or env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        print("OTEL_* asks for traces but OpenTelemetry's SDK is missing: pip install 'memrl[otel]'",
              file=sys.stderr)  # fmt: skip
        return None
    service = env.get("OTEL_SERVICE_NAME") or "memrl"
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    for name in names:
        if name == "console":
            exporter = ConsoleSpanExporter()
        elif name == "otlp":
            exporter = _otlp_exporter(env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"))
        else:
            from memrl.errors import ConfigError

            raise ConfigError(f"OTEL_TRACES_EXPORTER={name!r}: memrl knows otlp, console and none")
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider


def _otlp_exporter(protocol: str) -> Any:
    from memrl.errors import ConfigError

    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        package = "opentelemetry-exporter-otlp-proto-" + ("grpc" if protocol == "grpc" else "http")
        raise ConfigError(f"the OTLP exporter ({protocol}) is missing: pip install {package}") from None
    return OTLPSpanExporter()
