"""``Memory``: the synchronous wrapper of :class:`~memrl.memory.facade.memory.AsyncMemory` (same arguments, same
methods, blocking calls), run on a private event-loop thread so it also works inside Jupyter or another
running loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from memrl.memory.embedders.base import Embedder
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.jobs.table import JobWriter
from memrl.memory.store.base import Store

T = TypeVar("T")


class Memory:
    """Synchronous wrapper of :class:`AsyncMemory` (same arguments, same methods, blocking calls)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="memrl-memory", daemon=True)
        self._thread.start()
        self.aio = AsyncMemory(*args, **kwargs)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.submit(coro).result()

    @property
    def store(self) -> Store:
        return self.aio.store

    @property
    def writer(self) -> JobWriter | None:
        return self.aio.writer

    @property
    def embedder(self) -> Embedder:
        return self.aio.embedder

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run a coroutine of ``self.aio`` on this memory's loop thread without waiting for it: for async
        callers (``await asyncio.wrap_future(m.submit(m.aio.get(...)))``), so code with both a blocking
        and an async side (the LangGraph store, the LangChain tools) uses one loop for both."""
        if self._loop.is_closed():
            coro.close()  # never awaited: close it so Python does not warn
            raise RuntimeError("this Memory is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._run(self.aio.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _blocking(name: str) -> Any:
    target = getattr(AsyncMemory, name)

    @functools.wraps(target)
    def method(self: Memory, *args: Any, **kwargs: Any) -> Any:
        return self._run(getattr(self.aio, name)(*args, **kwargs))

    return method


for _name in (
    "add add_many sweep_expired update delete restore merge split get list count search set_keys get_keys history versions undo "
    "reset clone "
    "namespaces export_lines import_lines core core_append core_replace core_rewrite "
    "remember maintain memorize read job jobs cancel_job undo_job get_all delete_all"
).split():
    setattr(Memory, _name, _blocking(_name))
