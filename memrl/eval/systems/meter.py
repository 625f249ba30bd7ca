"""A metering proxy: what another memory system's own LLM and embedder calls cost, counted at the wire.

mem0, LangMem and the like call an OpenAI-compatible endpoint themselves, through clients memrl does not
own. The harness points them at this proxy instead of the endpoint: it forwards every request unchanged
(``Authorization`` included) to the upstream URL and counts, from the upstream's replies, chat calls,
embedding calls, and prompt and completion tokens (the ``usage`` the endpoint reports)::

    with Meter("http://localhost:8000/v1") as meter:      # the system talks to meter.base_url
        before = meter.snapshot()
        ...                                               # ingest a session
        cost = meter.snapshot() - before

Counts are global to the proxy: the harness measures one system call at a time (a lock around ingest
and search), so a difference of two snapshots is that call's cost. Stdlib only.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Counts:
    """Calls and tokens seen by a :class:`Meter` (subtract two snapshots for one operation's cost)."""

    llm_calls: int = 0
    embed_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    embed_tokens: int = 0
    errors: int = 0

    def __sub__(self, other: Counts) -> Counts:
        return Counts(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class _Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    meter: Meter

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _forward(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(length) if length else None
        path = self.path[len("/v1") :] if self.path.startswith("/v1") else self.path
        url = self.meter.upstream.rstrip("/") + path
        headers = {
            k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type", "accept")
        }
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        reached = True
        try:
            with urllib.request.urlopen(req, timeout=self.meter.timeout) as resp:
                status, body, ctype = (
                    resp.status,
                    resp.read(),
                    resp.headers.get("Content-Type", "application/json"),
                )
        except urllib.error.HTTPError as e:
            status, body, ctype = e.code, e.read(), e.headers.get("Content-Type", "application/json")
        except (urllib.error.URLError, TimeoutError, OSError) as e:
            # the upstream never answered (refused, reset, timed out): an error, not a call it received
            # (a client's retry that gets through is the call, counted once)
            status, body, ctype = (
                502,
                json.dumps({"error": {"message": f"upstream: {e}"}}).encode(),
                "application/json",
            )
            reached = False
        self.meter._count(path, status, body, reached=reached)
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self._forward("POST")

    def do_GET(self) -> None:
        self._forward("GET")


class _Server(ThreadingHTTPServer):
    #: a burst of a system's parallel calls waits in the listen queue instead of being refused (the stdlib's 5)
    request_queue_size = 128


class Meter:
    """A proxy on loopback in front of ``upstream`` (an OpenAI-compatible ``.../v1`` URL); a context manager."""

    def __init__(self, upstream: str, *, timeout: float = 600.0) -> None:
        self.upstream, self.timeout = upstream, timeout
        self.counts = Counts()
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "the meter is not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def snapshot(self) -> Counts:
        with self._lock:
            return Counts(**self.counts.to_dict())

    def _count(self, path: str, status: int, body: bytes, *, reached: bool = True) -> None:
        if not reached:
            with self._lock:
                self.counts.errors += 1
            return
        try:
            usage = json.loads(body).get("usage") or {} if status == 200 else {}
        except (ValueError, AttributeError):
            usage = {}
        with self._lock:
            c = self.counts
            if status != 200:
                c.errors += 1
            if path.rstrip("/").endswith("/chat/completions"):
                c.llm_calls += 1
                c.prompt_tokens += int(usage.get("prompt_tokens") or 0)
                c.completion_tokens += int(usage.get("completion_tokens") or 0)
            elif path.rstrip("/").endswith("/embeddings"):
                c.embed_calls += 1
                c.embed_tokens += int(usage.get("prompt_tokens") or 0)

    def start(self) -> Meter:
        handler = type("Proxy", (_Proxy,), {"meter": self})
        self._httpd = _Server(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> Meter:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
