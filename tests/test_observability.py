"""The memory service watched (issue 58): the real app on loopback (uvicorn), real traffic, then ``/metrics``
scraped and parsed (counts by route template and status, a remember job by kind and outcome with its
model calls and tokens, the store's size), refused to a tenant's token; OpenTelemetry spans caught by an
in-memory exporter (a search: request -> search_memory -> its stages; a remember job: invoke_agent -> chat
and create_memory, GenAI attributes); the JSON lines per request and per job, and the flag that stops
them. The model is scripted (the boundary); the store, the search, the agents and the server are real."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest

from tests.server_helpers import ALICE, BOB, ROOT, TOKENS, client

prometheus = pytest.importorskip("prometheus_client", reason="needs the 'metrics' extra")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from memrl import telemetry  # noqa: E402
from memrl.agents.jobs import JobRunner  # noqa: E402
from memrl.cli.main import build_parser  # noqa: E402
from memrl.errors import ConfigError  # noqa: E402
from memrl.llm.base import LLMProviderError  # noqa: E402
from memrl.llm.scripted import ScriptedLLM  # noqa: E402
from memrl.memory.embedders.providers import HashingEmbedder  # noqa: E402
from memrl.memory.facade.memory import AsyncMemory  # noqa: E402
from memrl.server.http import ServerThread, Tokens  # noqa: E402
from memrl.server.memory_api import create_app  # noqa: E402
from memrl.server.observe import ObserveConfig  # noqa: E402
from tests.test_jobs import MESSAGES, membuilder_rule  # noqa: E402

ROOT_DIR = Path(__file__).resolve().parents[1]
SEARCH = "/v1/namespaces/{namespace}/search"
MEMORIES = "/v1/namespaces/{namespace}/memories"


@contextlib.contextmanager
def served(db, *, llm=None, observe=None):
    memory = AsyncMemory(db, embedder=HashingEmbedder(64))
    app = create_app(memory, Tokens.parse(TOKENS), jobs=JobRunner(memory, llm), observe=observe)
    with ServerThread(app) as server:
        yield server.base_url


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """``{(sample name, sorted labels): value}`` of ``/metrics`` read with the root token."""
    with client(url, ROOT) as c:
        r = c.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(r.text) for s in f.samples}  # fmt: skip


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_requests_are_counted_by_route_template_and_status(db_path):
    log = io.StringIO()
    with (
        served(db_path, observe=ObserveConfig(log_stream=log)) as url,
        client(url, ALICE) as a,
        client(url, BOB) as b,
    ):
        for text in ("Alice lives in Lisbon", "Alice plays the guitar"):
            assert a.post("/v1/namespaces/alice/memories", json={"content": text}).status_code == 201
        assert (
            a.post("/v1/namespaces/alice/search", json={"query": "where does Alice live"}).status_code == 200
        )
        assert b.post("/v1/namespaces/alice/search", json={"query": "where"}).status_code == 403
        assert a.get("/v1/namespaces/alice/memories/no-such-id").status_code == 404
        assert a.get("/no/such/route").status_code == 404
        # refused by the guard before any route ran (a rebound host name): counted under its route all the same
        rebound = a.post("/v1/namespaces/alice/search", json={"query": "x"}, headers={"Host": "evil.example"})
        assert rebound.status_code == 421
        before = scrape(url)
        assert a.post("/v1/namespaces/alice/search", json={"query": "guitar"}).status_code == 200
        after = scrape(url)
    total = "memrl_http_requests_total"
    assert value(before, total, route=MEMORIES, method="POST", status="201") == 2
    assert value(before, total, route=SEARCH, method="POST", status="200") == 1
    assert value(before, total, route=SEARCH, method="POST", status="403") == 1
    assert value(before, total, route=MEMORIES + "/{memory_id}", method="GET", status="404") == 1
    assert value(before, total, route="unmatched", method="GET", status="404") == 1
    assert value(before, total, route=SEARCH, method="POST", status="421") == 1
    # one more search moved exactly its own counter and its histogram
    assert value(after, total, route=SEARCH, method="POST", status="200") == 2
    assert value(after, total, route=MEMORIES, method="POST", status="201") == 2
    # 200, 403, 421, 200: every answer of the route is timed
    assert value(after, "memrl_http_request_duration_seconds_count", route=SEARCH, method="POST") == 4
    assert value(after, total, route="/metrics", method="GET", status="200") == 1  # the first scrape
    # no raw path became a label: the namespace is in no request label
    routes = {dict(labels).get("route") for (_, labels) in after if dict(labels).get("route")}
    assert not any("alice" in r for r in routes), routes
    assert value(after, "memrl_store_items", namespace="alice") == 2
    assert value(after, "memrl_store_namespaces") == 1
    assert value(after, "memrl_errors_total", where="request") == 0


def test_a_tenant_token_is_refused_metrics_and_learns_no_namespace(db_path):
    with served(db_path) as url, client(url, ALICE) as a, client(url, BOB) as b, client(url, None) as anon:
        assert a.post("/v1/namespaces/alice/memories", json={"content": "Alice lives in Lisbon"}).is_success
        r = b.get("/metrics")
        assert r.status_code == 403 and r.json()["error"]["type"] == "forbidden"
        assert "alice" not in r.text and "memrl_" not in r.text
        assert a.get("/metrics").status_code == 403  # a tenant of that very namespace too
        assert anon.get("/metrics").status_code == 401


def test_without_prometheus_client_metrics_is_501_naming_the_extra(db_path, monkeypatch):
    # an import of it fails, as when it is not installed
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with served(db_path) as url, client(url, ROOT) as c:
        r = c.get("/metrics")
        assert r.status_code == 501, r.text
        assert "memrl[metrics]" in r.json()["error"]["message"]
        assert c.get("/health").status_code == 200  # the rest of the service is unaffected


def test_a_remember_job_is_counted_by_kind_and_outcome_with_its_model_calls(db_path):
    llm = ScriptedLLM(membuilder_rule())
    log = io.StringIO()
    with served(db_path, llm=llm, observe=ObserveConfig(log_stream=log)) as url, client(url, ALICE) as a:
        body = {"messages": MESSAGES, "session_time": "2024-05-01T10:00:00"}
        job = a.post("/v1/namespaces/alice/remember?wait=true&timeout=60", json=body).json()
        assert job["status"] == "succeeded", job
        raw = a.post(
            "/v1/namespaces/alice/remember?wait=true&timeout=60", json={**body, "agent": "raw"}
        ).json()
        assert raw["status"] == "succeeded", raw
        samples = scrape(url)
    assert value(samples, "memrl_jobs_total", kind="remember", outcome="succeeded") == 2
    assert value(samples, "memrl_jobs_total", kind="remember", outcome="failed") == 0
    assert value(samples, "memrl_job_duration_seconds_count", kind="remember") == 2
    calls = len(llm.requests)  # the raw job made none
    assert calls >= 4
    model = {"provider": "scripted", "model": llm.model}
    assert value(samples, "memrl_llm_calls_total", **model, outcome="ok") == calls
    assert value(samples, "memrl_llm_tokens_total", **model, type="input") == job["tokens"]["prompt"] > 0
    assert value(samples, "memrl_llm_tokens_total", **model, type="output") == job["tokens"]["completion"] > 0
    lines = [json.loads(line) for line in log.getvalue().splitlines()]
    ended = {line["job_id"]: line for line in lines if line["event"] == "job"}
    assert ended[job["id"]]["kind"] == "remember" and ended[job["id"]]["outcome"] == "succeeded"
    assert ended[job["id"]]["namespace"] == "alice" and ended[job["id"]]["llm_calls"] == calls
    assert ended[job["id"]]["input_tokens"] == job["tokens"]["prompt"]
    assert ended[raw["id"]]["llm_calls"] == 0 and ended[raw["id"]]["duration_ms"] > 0


def test_a_job_whose_model_fails_is_counted_failed_with_its_failed_calls(db_path):
    down = [False]
    good = membuilder_rule()

    def rule(messages, tools, json_schema):
        if down[0]:
            raise LLMProviderError("the model server is down", status=503)
        return good(messages, tools, json_schema)

    llm = ScriptedLLM(rule)
    log = io.StringIO()
    with served(db_path, llm=llm, observe=ObserveConfig(log_stream=log)) as url, client(url, ALICE) as a:
        body = {"messages": MESSAGES, "session_time": "2024-05-01T10:00:00"}
        assert (
            a.post("/v1/namespaces/alice/remember?wait=true&timeout=60", json=body).json()["status"]
            == "succeeded"
        )
        ok_calls = len(llm.requests)
        down[0] = True
        job = a.post("/v1/namespaces/alice/remember?wait=true&timeout=60", json=body).json()
        assert job["status"] == "failed", job
        samples = scrape(url)
    model = {"provider": "scripted", "model": llm.model}
    assert value(samples, "memrl_jobs_total", kind="remember", outcome="succeeded") == 1
    assert value(samples, "memrl_jobs_total", kind="remember", outcome="failed") == 1
    assert value(samples, "memrl_llm_calls_total", **model, outcome="ok") == ok_calls
    failed_calls = value(samples, "memrl_llm_calls_total", **model, outcome="error")
    assert failed_calls >= 1
    assert value(samples, "memrl_errors_total", where="llm") == failed_calls
    assert value(samples, "memrl_errors_total", where="job") == 1
    ended = [json.loads(line) for line in log.getvalue().splitlines() if '"event": "job"' in line]
    assert [(x["job_id"], x["outcome"]) for x in ended][-1] == (job["id"], "failed")


def test_every_request_is_a_json_line_and_the_flag_turns_them_off(db_path):
    log = io.StringIO()
    with served(db_path, observe=ObserveConfig(log_stream=log)) as url, client(url, ALICE) as a:
        assert a.post("/v1/namespaces/alice/memories", json={"content": "Alice lives in Lisbon"}).is_success
        assert a.get("/v1/namespaces/bob/memories").status_code == 403
    lines = [json.loads(line) for line in log.getvalue().splitlines()]
    assert [(x["method"], x["route"], x["status"], x["namespace"], x["token"]) for x in lines] == [
        ("POST", MEMORIES, 201, "alice", "alice"),
        ("GET", MEMORIES, 403, "bob", "alice"),
    ]
    assert all(x["event"] == "request" and x["duration_ms"] > 0 and x["ts"].endswith("Z") for x in lines)

    quiet = io.StringIO()
    with (
        served(db_path, observe=ObserveConfig(access_log=False, log_stream=quiet)) as url,
        client(url, ALICE) as a,
    ):
        assert a.get("/v1/namespaces/alice/memories").status_code == 200
    assert quiet.getvalue() == ""
    # the command line's flag is that field
    args = build_parser().parse_args(["serve", "memory", "--no-access-log"])
    assert args.no_access_log is True
    assert build_parser().parse_args(["serve", "memory"]).no_access_log is False


# ---------------------------------------------------------------------------------------------- traces
@pytest.fixture
def spans():
    sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="needs the 'otel' extra")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.use(provider)
    try:
        yield exporter
    finally:
        telemetry.use(None)
        provider.shutdown()


def _tree(finished) -> tuple[dict, dict]:
    by_id = {s.context.span_id: s for s in finished}
    parent = {s.name: (by_id[s.parent.span_id].name if s.parent and s.parent.span_id in by_id else None)
              for s in finished}  # fmt: skip
    return {s.name: s for s in finished}, parent


def test_a_search_is_traced_request_memory_operation_and_stages(db_path, spans):
    with served(db_path) as url, client(url, ALICE) as a:
        assert a.post("/v1/namespaces/alice/memories", json={"content": "Alice lives in Lisbon"}).is_success
        spans.clear()
        assert (
            a.post("/v1/namespaces/alice/search", json={"query": "where does Alice live"}).status_code == 200
        )
    named, parent = _tree(spans.get_finished_spans())
    request = f"POST {SEARCH}"
    assert parent[request] is None and named[request].attributes["http.response.status_code"] == 200
    assert named[request].attributes["http.route"] == SEARCH
    assert parent["search_memory alice"] == request
    op = named["search_memory alice"].attributes
    assert op[telemetry.OPERATION] == "search_memory" and op[telemetry.STORE_ID] == "alice"
    assert op["memrl.search.hits"] == 1
    assert "gen_ai.memory.query.text" not in op  # content is opt-in: never sent
    for stage in ("embed", "dense", "bm25", "rank", "fetch"):
        assert parent[f"memrl.search.{stage}"] == "search_memory alice", stage


def test_writes_and_a_clone_are_traced_as_memory_operations(db_path, spans):
    with served(db_path) as url, client(url, ALICE) as a:
        item = a.post("/v1/namespaces/alice/memories", json={"content": "Alice lives in Lisbon"}).json()
        assert a.patch(
            f"/v1/namespaces/alice/memories/{item['id']}", json={"content": "Alice lives in Porto"}
        ).is_success
        assert a.delete(f"/v1/namespaces/alice/memories/{item['id']}").is_success
        assert a.post(f"/v1/namespaces/alice/memories/{item['id']}/restore").is_success
        assert a.post("/v1/namespaces/alice/clone", json={"target": "alice-copy"}).status_code == 201
    named, parent = _tree(spans.get_finished_spans())
    ops = [(s.attributes[telemetry.OPERATION], s.attributes.get("memrl.memory.op"), s.attributes.get(telemetry.RECORD_ID))
           for s in spans.get_finished_spans() if s.name.endswith((" alice", " alice-copy"))]  # fmt: skip
    mid = item["id"]
    assert ops == [("create_memory", None, None), ("update_memory", None, mid), ("delete_memory", None, mid),
                   ("update_memory", "restore", mid), ("create_memory_store", None, None)]  # fmt: skip
    assert named["create_memory_store alice-copy"].attributes["memrl.memory.clone_of"] == "alice"
    assert parent["create_memory_store alice-copy"] == "POST /v1/namespaces/{namespace}/clone"


def test_a_remember_job_is_traced_agent_model_calls_and_writes(db_path, spans):
    llm = ScriptedLLM(membuilder_rule())
    with served(db_path, llm=llm) as url, client(url, ALICE) as a:
        body = {"messages": MESSAGES, "session_time": "2024-05-01T10:00:00"}
        job = a.post("/v1/namespaces/alice/remember?wait=true&timeout=60", json=body).json()
        assert job["status"] == "succeeded", job
    finished = spans.get_finished_spans()
    by_id = {s.context.span_id: s for s in finished}
    agent = next(s for s in finished if s.name == "invoke_agent membuilder")
    assert agent.attributes[telemetry.OPERATION] == "invoke_agent"
    assert agent.attributes[telemetry.AGENT_NAME] == "membuilder"
    assert (
        agent.attributes["memrl.job.id"] == job["id"] and agent.attributes["memrl.job.outcome"] == "succeeded"
    )

    def under_agent(s) -> bool:
        while s.parent is not None and s.parent.span_id in by_id:
            s = by_id[s.parent.span_id]
            if s is agent:
                return True
        return False

    chats = [s for s in finished if s.name == f"chat {llm.model}"]
    assert len(chats) == len(llm.requests) and all(under_agent(s) for s in chats)
    assert sum(s.attributes[telemetry.INPUT_TOKENS] for s in chats) == job["tokens"]["prompt"]
    assert sum(s.attributes[telemetry.OUTPUT_TOKENS] for s in chats) == job["tokens"]["completion"]
    assert {s.attributes[telemetry.REQUEST_MODEL] for s in chats} == {llm.model}
    assert {s.attributes[telemetry.OPERATION] for s in chats} == {"chat"}
    writes = [s for s in finished if s.attributes.get(telemetry.OPERATION) == "create_memory"]
    assert writes and all(under_agent(s) for s in writes)


def test_without_a_tracer_provider_spans_cost_nothing():
    telemetry.use(None)
    assert telemetry.span("x") is telemetry.NO_SPAN  # no provider set in this process: nothing is traced
    assert telemetry.memory_span("search_memory", "alice") is telemetry.NO_SPAN


def test_otel_environment_names_the_exporter():
    assert telemetry.configure_from_env({}) is None
    assert telemetry.configure_from_env({"OTEL_TRACES_EXPORTER": "none"}) is None
    assert (
        telemetry.configure_from_env({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}) is None
    )
    pytest.importorskip("opentelemetry.sdk.trace", reason="needs the 'otel' extra")
    with pytest.raises(ConfigError, match="zipkin"):
        telemetry.configure_from_env({"OTEL_TRACES_EXPORTER": "zipkin"})


# ---------------------------------------------------------------------------------------------- the command
def _serve(tmp_path, *flags: str, env: dict[str, str] | None = None) -> tuple[str, str]:
    """``memrl serve memory`` in a process of its own: one add, then Ctrl-C; (stdout, stderr)."""
    import os
    import signal
    import subprocess

    import httpx

    argv = [sys.executable, "-m", "memrl.cli.main", "serve", "memory", "--db", str(tmp_path / "m.db"),
            "--port", "0", "--embedder", "hashing:64", "--no-ui", "--token", f"alice={ALICE}:alice", *flags]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT_DIR), "PYTHONFAULTHANDLER": "1", **(env or {})}
    # Ctrl-C as a terminal sends it: a test run started in the background (``cmd &``) ignores SIGINT, and a
    # child inherits that, so the server would never see the signal: it gets the default disposition back
    proc = subprocess.Popen(
        argv, cwd=ROOT_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        banner = proc.stdout.readline()
        assert banner.startswith("serving "), banner + proc.stderr.read()
        url = banner.split(" at ")[1].split()[0]
        r = httpx.post(url + "/v1/namespaces/alice/memories", json={"content": "Alice lives in Lisbon"},
                       headers={"Authorization": f"Bearer {ALICE}"}, timeout=30)  # fmt: skip
        assert r.status_code == 201, r.text
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # say where it hangs: faulthandler dumps every thread on SIGABRT
            proc.send_signal(signal.SIGABRT)
            out, err = proc.communicate(timeout=30)
            raise AssertionError(f"the server did not stop within 60 s of Ctrl-C:\n{err[-6000:]}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return out, err


def _json_lines(text: str) -> list[dict]:
    found = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and "event" in record:
                found.append(record)
    return found


def test_the_command_logs_and_traces_by_default_and_the_flag_stops_the_lines(tmp_path):
    pytest.importorskip("opentelemetry.sdk.trace", reason="needs the 'otel' extra")
    out, err = _serve(tmp_path, env={"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "memrl-test"})
    lines = [(x["event"], x["route"], x["status"]) for x in _json_lines(err)]
    assert lines == [("request", MEMORIES, 201)], err
    # the console exporter printed the request's span and its memory operation, as JSON objects
    assert f'"name": "POST {MEMORIES}"' in out and '"name": "create_memory alice"' in out, out[-2000:]
    assert '"service.name": "memrl-test"' in out

    out, err = _serve(tmp_path, "--no-access-log")
    assert _json_lines(err) == [], err
    assert '"name": "POST' not in out  # no OTEL_* variable: nothing traced
