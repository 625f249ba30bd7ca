"""Serve any memrl LLM as a small OpenAI-compatible HTTP server (stdlib only).

``POST /v1/chat/completions`` (``tools`` -> ``tool_calls``, ``response_format`` json_schema / json_object,
``temperature``, ``top_p``, ``max_tokens``, ``seed``, ``stop``), ``GET /v1/models`` and, given an ``embed``
function (``memrl serve llm --embedder hashing``), ``POST /v1/embeddings``. When the back-end
knows token ids and logprobs they are returned the way vLLM does (``prompt_token_ids``,
``choices[0].token_ids``, ``logprobs.content[i].token == "token_id:<id>"``), so RL code written against
vLLM also works against a local model. Streaming and ``n > 1`` are not supported (400).

Use it to put the offline model behind the OpenAI client, or in tests to put a scripted LLM behind a real
HTTP boundary, with injected faults::

    with serve(ScriptedLLM(["hi"])) as base_url:                 # http://127.0.0.1:<port>/v1
        llm = OpenAILLM("scripted", base_url=base_url)

    with LLMServer(llm) as server:                               # same, with statistics and faults
        server.fail_next(2, status=500)                          # the next 2 requests get HTTP 500
        server.delay = 0.5                                       # every request waits 0.5 s first
        ...; server.num_requests, server.max_active, server.requests[-1]  # what clients sent

``run_server(llm, host, port)`` blocks (what ``memrl serve`` calls).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from memrl.errors import ProviderError, ValidationError
from memrl.llm.base import LLM, ChatResponse, SamplingParams, tool_names

log = logging.getLogger(__name__)


def request_to_chat_args(body: dict[str, Any]) -> dict[str, Any]:
    """Translate an OpenAI chat-completions request body into ``LLM.chat`` keyword arguments."""
    if body.get("stream"):
        raise ValidationError("streaming is not supported by the memrl server; send stream=false")
    if (body.get("n") or 1) != 1:
        raise ValidationError("only n=1 is supported")
    stop = body.get("stop")
    sampling = SamplingParams(
        temperature=1.0 if body.get("temperature") is None else float(body["temperature"]),  # OpenAI default
        top_p=1.0 if body.get("top_p") is None else float(body["top_p"]),
        max_tokens=int(body.get("max_completion_tokens") or body.get("max_tokens") or 512),
        seed=body.get("seed"),
        stop=[stop] if isinstance(stop, str) else stop,
    )
    tools = body.get("tools") or None
    choice = body.get("tool_choice") or "auto"
    if isinstance(choice, dict):  # {"type": "function", "function": {"name": X}}: force that tool
        wanted = choice.get("function", {}).get("name")
        tools = [t for t, n in zip(tools or [], tool_names(tools), strict=True) if n == wanted]
        if not tools:
            raise ValidationError(f"tool_choice names {wanted!r}, which is not among the tools")
        choice = "required"
    schema = None
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise ValidationError("response_format.json_schema.schema must be a JSON schema object")
    elif fmt.get("type") == "json_object":
        schema = {"type": "object"}
    return {
        "messages": body.get("messages"),
        "tools": tools,
        "tool_choice": choice,
        "json_schema": schema,
        "sampling": sampling,
    }


def response_to_body(resp: ChatResponse, model: str) -> dict[str, Any]:
    """An OpenAI ``chat.completion`` object (plus vLLM's token-id fields when known)."""
    message: dict[str, Any] = {"role": "assistant", "content": resp.text or (None if resp.tool_calls else "")}
    if resp.tool_calls:
        message["tool_calls"] = [c.to_openai() for c in resp.tool_calls]
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "finish_reason": "tool_calls" if resp.tool_calls else resp.finish_reason,
        "logprobs": None,
    }
    if resp.logprobs is not None and resp.completion_ids is not None:
        choice["logprobs"] = {
            "content": [
                {"token": f"token_id:{t}", "logprob": lp, "bytes": None, "top_logprobs": []}
                for t, lp in zip(resp.completion_ids, resp.logprobs, strict=False)
            ]
        }
    if resp.completion_ids is not None:
        choice["token_ids"] = resp.completion_ids
    body: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": resp.usage.prompt_tokens,
            "completion_tokens": resp.usage.completion_tokens,
            "total_tokens": resp.usage.total_tokens,
        },
    }
    if resp.prompt_ids is not None:
        body["prompt_token_ids"] = resp.prompt_ids
    return body


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: every reply carries Content-Length
    app: LLMServer  # set on the per-server subclass

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (e.g. its timeout)
            self.close_connection = True

    def _error(self, status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> None:
        self._send(status, {"error": {"message": message, "type": kind, "code": status}}, headers)

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            model = {"id": self.app.model_name, "object": "model", "created": 0, "owned_by": "memrl"}
            self._send(200, {"object": "list", "data": [model]})
        elif self.path.rstrip("/") in ("/health", "/v1/health"):
            self._send(200, {"status": "ok"})
        else:
            self._error(404, f"no route {self.path}", "not_found")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        route = self.path.rstrip("/")
        embeddings = route in ("/v1/embeddings", "/embeddings") and self.app.embed is not None
        if route not in ("/v1/chat/completions", "/chat/completions") and not embeddings:
            self._error(404, f"no route {self.path}", "not_found")
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as e:
            self._error(400, f"request body is not JSON: {e}", "invalid_request_error")
            return
        if embeddings:
            self._embeddings(body)
            return
        self.app._enter(body)
        try:
            self._chat(body)
        finally:
            self.app._leave()

    def _embeddings(self, body: dict[str, Any]) -> None:
        """``POST /v1/embeddings`` with the server's ``embed`` function (floats, or base64 float32 as the
        ``openai`` SDK asks by default)."""
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            self._error(400, "input must be a string or a list of strings", "invalid_request_error")
            return
        with self.app._lock:
            self.app.embedding_requests.append(body)
        vectors = [[float(x) for x in v] for v in self.app.embed(texts)]  # type: ignore[misc]
        if body.get("encoding_format") == "base64":
            import base64
            import struct

            data = [base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode() for v in vectors]
        else:
            data = vectors  # type: ignore[assignment]
        tokens = sum(len(t.split()) for t in texts)
        self._send(200, {"object": "list", "model": body.get("model") or self.app.model_name,
                         "data": [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(data)],
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})  # fmt: skip

    def _chat(self, body: dict[str, Any]) -> None:
        app = self.app
        if app.delay:
            time.sleep(app.delay)
        fault = app._take_fault()
        if fault is not None:
            status, retry_after = fault
            headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
            self._error(status, f"injected fault (HTTP {status})", "server_error", headers)
            return
        try:
            kwargs = request_to_chat_args(body)
        except (ValidationError, TypeError, ValueError) as e:  # bad field types/values in the request
            self._error(400, str(e), "invalid_request_error")
            return
        loop = app._loop
        if loop is None or loop.is_closed():  # the server stopped while this request waited
            self._error(503, "server is shutting down", "server_error")
            return
        coro = app.llm.chat(**kwargs)
        try:
            resp = asyncio.run_coroutine_threadsafe(coro, loop).result()
        except ValidationError as e:  # e.g. malformed messages
            self._error(400, str(e), "invalid_request_error")
        except ProviderError as e:
            self._error(502, f"{type(e).__name__}: {e}", "provider_error")
        except Exception as e:  # a bug in the back-end (or the loop stopped): report it, keep serving
            coro.close()
            log.exception("back-end failed")
            self._error(500, f"{type(e).__name__}: {e}", "server_error")
        else:
            self._send(200, response_to_body(resp, body.get("model") or app.model_name))


class _HTTPServer(ThreadingHTTPServer):
    #: a burst of parallel clients waits in the listen queue instead of being refused (the stdlib's 5)
    request_queue_size = 128


class LLMServer:
    """An OpenAI-compatible server for ``llm`` in background threads; a context manager."""

    def __init__(
        self, llm: LLM, host: str = "127.0.0.1", port: int = 0, *, model_name: str | None = None,
        embed: Callable[[list[str]], Any] | None = None,
    ):  # fmt: skip
        self.llm = llm
        self.embed = embed  # texts -> vectors: serves POST /v1/embeddings when given
        self.embedding_requests: list[dict[str, Any]] = []
        self.host, self.port = host, port
        self.model_name = model_name or llm.model
        self.delay = 0.0
        self.requests: list[dict[str, Any]] = []  # bodies of chat requests, in arrival order
        self.max_active = 0
        self._active = 0
        self._faults: list[tuple[int, float | None]] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._threads: list[threading.Thread] = []

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def num_requests(self) -> int:
        return len(self.requests)

    def fail_next(self, n: int, status: int = 500, retry_after: float | None = None) -> None:
        """Answer the next ``n`` chat requests with HTTP ``status`` (optionally a Retry-After header)."""
        with self._lock:
            self._faults.extend([(status, retry_after)] * n)

    def _take_fault(self) -> tuple[int, float | None] | None:
        with self._lock:
            return self._faults.pop(0) if self._faults else None

    def _enter(self, body: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(body)
            self._active += 1
            self.max_active = max(self.max_active, self._active)

    def _leave(self) -> None:
        with self._lock:
            self._active -= 1

    def start(self) -> LLMServer:
        # One event loop runs every back-end call, so clients and semaphores inside the LLM stay on it.
        self._loop = asyncio.new_event_loop()
        handler = type("Handler", (_Handler,), {"app": self})
        self._httpd = _HTTPServer((self.host, self.port), handler)
        self._httpd.daemon_threads = True
        self.host, self.port = self._httpd.server_address[:2]
        self._threads = [
            threading.Thread(target=self._loop.run_forever, name="memrl-server-loop", daemon=True),
            threading.Thread(
                target=self._httpd.serve_forever, args=(0.05,), name="memrl-server-http", daemon=True
            ),
        ]
        for t in self._threads:
            t.start()
        log.info("serving %s at %s", self.llm.name, self.base_url)
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            for t in self._threads:
                t.join(timeout=5)
            self._loop.close()
            self._loop = None

    def __enter__(self) -> LLMServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


@contextlib.contextmanager
def serve(llm: LLM, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """``with serve(llm) as base_url:`` an OpenAI-compatible endpoint on loopback (ephemeral port)."""
    with LLMServer(llm, host, port) as server:
        yield server.base_url


def run_server(
    llm: LLM, host: str = "127.0.0.1", port: int = 8000, *, embed: Callable[[list[str]], Any] | None = None
) -> None:
    """Serve until interrupted (Ctrl-C)."""
    server = LLMServer(llm, host, port, embed=embed).start()
    print(f"memrl: serving {llm.name} at {server.base_url} (Ctrl-C to stop)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
