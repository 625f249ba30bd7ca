"""What one request, and one tenant, may take of a server: body sizes, requests in flight, long polls, store
work (docs/service.md, "Limits").

:class:`LimitsMiddleware` (ASGI) applies the per-request limits before any route runs:

- a body above ``max_body_bytes`` (imports: ``max_import_bytes``) gets 413 before it is read whole;
- at most ``max_concurrency`` requests run at once; the others wait up to ``queue_timeout`` seconds, then
  503 with ``Retry-After``;
- one token has at most ``max_inflight_per_token`` of those at once: past it, 429 with ``Retry-After`` at
  once, so a tenant flooding the server fills its own share, never the others';
- ``/health`` takes no place at all: it answers whatever the load;
- a request that starts waiting for something that costs no thread (a long poll, ``?wait=true``) gives its
  place back (:data:`SLOT`); waits are capped by :class:`Waits` instead (per token, and in all).

The request's token name goes into :data:`memrl.server.offload.CLIENT`, which the store gate
(:class:`~memrl.server.offload.StoreGate`) uses for its per-client share of the store threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from memrl.errors import LimitError
from memrl.server.offload import CLIENT
from memrl.server.replies import error_body, send_json

#: Paths that take no place (cheap, and what a load balancer asks while the server is loaded).
FREE_PATHS = frozenset({"/health"})


@dataclass(frozen=True)
class Limits:
    """A server's limits (``memrl serve`` flags of the same names). ``max_body_bytes`` for every request
    but imports (``POST .../import``), which may be up to ``max_import_bytes``: an import is validated line
    by line and spooled to disk, not held in memory."""

    max_body_bytes: int = 1_000_000
    max_concurrency: int = 32
    queue_timeout: float = 10.0
    max_import_bytes: int = 1 << 30
    max_inflight_per_token: int = 16  # requests of one token at once (429 past it)
    max_waits_per_token: int = 8  # long polls of one token at once (429 past it)
    max_waits: int = 1000  # long polls at once in all
    store_workers: int = 8  # threads doing store and search work
    store_timeout: float = 30.0  # the most a request waits for its store work (503 past it)
    max_as_of_changes: int = 100_000  # history entries an as_of request may rebuild (422 past it)
    embedder_wait: float = 600.0  # the most a request that embeds waits for the model's load (503 past it)


class Slot:
    """A request's place among the ``max_concurrency``; :meth:`release` gives it back early (idempotent)."""

    def __init__(self, release: Callable[[], None]) -> None:
        self._release: Callable[[], None] | None = release

    def release(self) -> None:
        if self._release is not None:
            done, self._release = self._release, None
            done()


#: The current request's place (None outside :class:`LimitsMiddleware`).
SLOT: contextvars.ContextVar[Slot | None] = contextvars.ContextVar("memrl_slot", default=None)


class Waits:
    """Long polls in progress: at most ``per_client`` per token (``None``: no token, not capped per client)
    and ``total`` in all. :meth:`enter` gives the request's :data:`SLOT` back while it waits."""

    def __init__(self, per_client: int, total: int) -> None:
        self.per_client, self.total = per_client, total
        self._by: dict[str, int] = {}
        self._all = 0

    @contextlib.contextmanager
    def enter(self, client: str | None) -> Iterator[None]:
        if self._all >= self.total:
            raise LimitError(
                f"the server has {self._all} waits in progress, the most it holds; retry shortly"
            )
        if client is not None and self._by.get(client, 0) >= self.per_client:
            raise LimitError(
                f"token {client!r} has {self._by[client]} waits (wait=true) in progress, the most one token may "
                f"have ({self.per_client}); poll without wait, or retry once one ends"
            )
        slot = SLOT.get()
        if slot is not None:
            slot.release()  # waiting costs no thread: it holds no place either
        self._all += 1
        if client is not None:
            self._by[client] = self._by.get(client, 0) + 1
        try:
            yield
        finally:
            self._all -= 1
            if client is not None:
                self._by[client] -= 1
                if not self._by[client]:
                    del self._by[client]


class LimitsMiddleware:
    """ASGI middleware applying :class:`Limits` (see the module docstring). ``client_of(authorization)``:
    the token's name for an ``Authorization`` header (None without tokens, or for a wrong token, which the
    routes answer with 401)."""

    def __init__(
        self, app: Any, limits: Limits, client_of: Callable[[str | None], str | None] | None = None
    ) -> None:
        self.app, self.limits, self.client_of = app, limits, client_of
        self._sem: asyncio.Semaphore | None = None
        self.active = 0
        self.max_active = 0
        self._per_client: dict[str, int] = {}

    def _client(self, scope: dict) -> str | None:
        if self.client_of is None:
            return None
        auth = dict(scope.get("headers") or []).get(b"authorization")
        return self.client_of(auth.decode("latin-1") if auth is not None else None)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope.get("path") in FREE_PATHS and scope.get("method") in ("GET", "HEAD"):
            return await self.app(scope, receive, send)
        importing = scope.get("method") == "POST" and scope.get("path", "").endswith("/import")
        limit = self.limits.max_import_bytes if importing else self.limits.max_body_bytes
        option = "--max-import-bytes" if importing else "--max-body-bytes"
        too_big = f"request body is larger than the limit of {limit} bytes (the server's {option})"
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            return await send_json(send, 413, error_body("too_large", too_big))
        client = self._client(scope)
        if client is not None:
            have = self._per_client.get(client, 0)
            if have >= self.limits.max_inflight_per_token:
                msg = (f"token {client!r} has {have} requests in flight, the most one token may have "
                       f"({self.limits.max_inflight_per_token}, --max-inflight-per-token); retry shortly")  # fmt: skip
                return await send_json(send, 429, error_body("too_many_requests", msg), {"Retry-After": "1"})
            self._per_client[client] = have + 1
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.limits.max_concurrency)
        sem = self._sem

        def give_back() -> None:
            sem.release()
            self.active -= 1
            if client is not None:
                self._per_client[client] -= 1
                if not self._per_client[client]:
                    del self._per_client[client]

        try:
            await asyncio.wait_for(sem.acquire(), self.limits.queue_timeout)
        except asyncio.TimeoutError:
            if client is not None:
                self._per_client[client] -= 1
                if not self._per_client[client]:
                    del self._per_client[client]
            msg = f"server busy: {self.limits.max_concurrency} requests in flight; retry shortly"
            return await send_json(send, 503, error_body("overloaded", msg), {"Retry-After": "1"})
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        slot = Slot(give_back)
        seen, started, refused = 0, False, False

        async def counted_receive() -> dict:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if (
                    seen > limit
                ):  # a streamed body without Content-Length: refuse it, the app sees a disconnect
                    if not started and not refused:
                        refused = True
                        await send_json(send, 413, error_body("too_large", too_big))
                    return {"type": "http.disconnect"}
            return message

        async def tracked_send(message: dict) -> None:
            nonlocal started
            if refused:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        tokens = SLOT.set(slot), CLIENT.set(client or "anonymous")
        try:
            await self.app(scope, counted_receive, tracked_send)
        except Exception:
            if not refused:
                raise
        finally:
            CLIENT.reset(tokens[1])
            SLOT.reset(tokens[0])
            slot.release()
