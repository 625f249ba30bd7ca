"""Store and search work off the server's event loop: a bounded pool of threads, one namespace at a time,
a share per client and a deadline per request.

memrl's store calls block (SQLite waits for another process's write lock, Postgres for a namespace lock, a
search builds its indexes, an ``as_of`` search rebuilds a namespace from its history). On the event loop,
one such call held every other request, ``/health`` included. :class:`StoreGate` runs them on
``workers`` threads, each with an event loop of its own for the memory's coroutines, so the server's loop
only moves bytes:

- **one namespace at a time**: work on a namespace waits (on the event loop, holding no thread) until the
  namespace's previous work is done, as it did when everything ran on one thread, so the per-namespace
  caches of search never see two threads; work on different namespaces runs at once;
- **a share per client**: one client (the request's token, :data:`CLIENT`) holds at most ``per_client``
  threads, so a tenant flooding the server waits for its own share and never for the others';
- **a deadline**: a request whose work has not finished ``timeout`` seconds after it asked gets 503 with
  ``Retry-After`` (the work still finishes on its thread, and its namespace stays held until then); when
  ``slow`` names a reason (the embedding model still loading: :mod:`memrl.server.warmup`) the 503 says it.

:class:`ServedMemory` is an :class:`~memrl.memory.AsyncMemory` whose methods go through the gate (for the
browser's pages and MCP); the REST routes hand the gate whole tool calls.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from memrl.server.replies import HTTPError

T = TypeVar("T")

#: Who the current request is (the token's name, ``anonymous`` without tokens): set by the limits middleware.
CLIENT: contextvars.ContextVar[str] = contextvars.ContextVar("memrl_client", default="anonymous")


def busy(message: str, retry_after: float = 1.0) -> HTTPError:
    return HTTPError(503, message, "busy", {"Retry-After": str(max(1, round(retry_after)))})


class StoreGate:
    """The pool (see the module docstring). ``per_client`` defaults to half the workers (at least one).
    ``slow``: ``() -> (reason, retry_after)`` or None, asked when a request runs out of time."""

    def __init__(
        self,
        workers: int = 8,
        timeout: float = 30.0,
        per_client: int | None = None,
        slow: Callable[[], tuple[str, float] | None] | None = None,
    ) -> None:
        self.workers, self.timeout, self.slow = workers, timeout, slow
        self.per_client = per_client or max(1, workers // 2)
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="memrl-store")
        self._local = threading.local()
        self._namespaces: dict[str, list[Any]] = {}  # namespace -> [lock, requests holding or awaiting it]
        self._clients: dict[str, asyncio.Semaphore] = {}

    async def run(self, keys: Sequence[str], fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` (a coroutine function is run to completion on the thread's own event loop)
        on a worker thread, holding the namespaces ``keys`` (none: no namespace) and one of the client's
        places; 503 past the deadline."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        held: list[Any] = []

        def release() -> None:
            for h in reversed(held):
                h.release()
            held.clear()
            for ns in named:
                entry = self._namespaces[ns]
                entry[1] -= 1
                if entry[1] == 0:
                    del self._namespaces[ns]
            named.clear()

        named: list[str] = []

        try:
            client = CLIENT.get()
            share = self._clients.setdefault(client, asyncio.Semaphore(self.per_client))
            await self._acquire(
                share, deadline, f"this client's {self.per_client} store requests are running"
            )
            held.append(share)
            for ns in sorted(set(keys)):
                entry = self._namespaces.setdefault(ns, [asyncio.Lock(), 0])
                entry[1] += 1
                named.append(ns)
                await self._acquire(entry[0], deadline, f"namespace {ns!r} is busy with earlier requests")
                held.append(entry[0])
            ctx = contextvars.copy_context()
            fut = loop.run_in_executor(self.pool, ctx.run, self._call, fn, args, kwargs)
        except BaseException:
            release()
            raise
        try:
            return await asyncio.wait_for(asyncio.shield(fut), max(0.0, deadline - loop.time()))
        except (asyncio.TimeoutError, asyncio.CancelledError) as e:
            if fut.done():
                release()
            else:  # the work goes on: what it holds is released when it ends
                fut.add_done_callback(lambda f: (f.cancelled() or f.exception(), release()))
            if isinstance(e, asyncio.CancelledError):
                raise
            why = self.slow() if self.slow is not None else None
            if why is not None:
                raise busy(f"{why[0]}; retry in a few seconds", why[1]) from None
            raise busy(f"the store did not answer within {self.timeout:g} s (busy); retry shortly") from None
        finally:
            if fut.done():
                release()

    async def _acquire(self, lock: Any, deadline: float, why: str) -> None:
        left = deadline - asyncio.get_running_loop().time()
        try:
            await asyncio.wait_for(lock.acquire(), max(0.0, left))
        except asyncio.TimeoutError:
            raise busy(f"{why}; retry shortly") from None

    def _call(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        if not inspect.iscoroutinefunction(fn):
            return fn(*args, **kwargs)
        loop = getattr(self._local, "loop", None)
        if loop is None:
            loop = self._local.loop = asyncio.new_event_loop()
        return loop.run_until_complete(fn(*args, **kwargs))

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


#: AsyncMemory methods that hand work to the job runner, which lives on the server's own loop.
_ON_LOOP = frozenset({"remember", "maintain", "memorize", "read", "job", "cancel_job", "undo_job", "close"})


#: AsyncMemory methods that embed: through a gate with ``ready``, they first wait for the embedder's load.
_EMBEDS = frozenset({"add", "add_many", "update", "search", "merge", "split"})


class ServedMemory:
    """``memory`` with each coroutine method run through ``gate`` (on its namespace: ``namespace=`` or
    ``user_id=``, else the memory's default; ``clone`` holds both of its namespaces, ``namespaces`` none).
    The job methods stay on the caller's loop (the runner offloads its own store work); attributes pass
    through. ``ready``: awaited before a method that embeds (the embedder's load, :mod:`memrl.server.warmup`). :meth:`call` runs any other function (a store method) through the gate."""

    def __init__(self, memory: Any, gate: StoreGate, ready: Callable[[], Any] | None = None) -> None:
        self.memory, self.gate, self.ready = memory, gate, ready

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.memory, name)
        if name in _ON_LOOP or not inspect.iscoroutinefunction(attr):
            return attr

        async def through_gate(*args: Any, **kwargs: Any) -> Any:
            if self.ready is not None and name in _EMBEDS and kwargs.get("mode") != "bm25":
                await self.ready()  # the embedding model's load, before the store deadline starts
            return await self.gate.run(self._keys(name, args, kwargs), attr, *args, **kwargs)

        return through_gate

    def _keys(self, name: str, args: tuple, kwargs: dict) -> tuple[str, ...]:
        if name == "namespaces":
            return ()
        if name == "clone":
            return tuple(str(a) for a in args[:2])
        ns = kwargs.get("namespace") or kwargs.get("user_id") or self.memory.namespace
        return (str(ns),)

    async def call(self, keys: Sequence[str], fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await self.gate.run(keys, fn, *args, **kwargs)


async def call_on(memory: Any, keys: Sequence[str], fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` through ``memory``'s gate when it is a :class:`ServedMemory` (else at once)."""
    if isinstance(memory, ServedMemory):
        return await memory.call(keys, fn, *args, **kwargs)
    return fn(*args, **kwargs)
