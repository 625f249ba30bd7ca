"""Where an integration's memory calls run (one event loop for a framework's blocking and async sides), and
:func:`need`, the import of a framework that names the extra installing it.

LangGraph's store and LangChain's tools are called both ways (``store.put`` from a sync tool, ``await
store.aput`` from an async node). :class:`Runner` takes the memory they were built on:

- a :class:`~memrl.memory.Memory` (the blocking wrapper): every call, sync or async, runs on that
  memory's own loop thread (``Memory.submit``), so the two sides share one loop;
- an :class:`~memrl.memory.AsyncMemory`: async calls run on the caller's loop; a blocking call (from a
  thread with no running loop) runs on a private loop thread of the runner. Using both sides on one
  ``AsyncMemory`` puts its work on two loops: build on a ``Memory`` when both are used.
"""

from __future__ import annotations

import asyncio
import importlib
import threading
from collections.abc import Callable, Coroutine
from types import ModuleType
from typing import Any, TypeVar

from memrl.errors import ConfigError

T = TypeVar("T")

__all__ = ["Runner", "need"]


def need(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` for ``what``, or say which extra of memrl installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ConfigError(
            f"{what} needs the package {module.split('.')[0]!r} ({e}): pip install 'memrl[{extra}]'"
        ) from None


class Runner:
    """Runs coroutines of one :class:`~memrl.memory.AsyncMemory` from blocking and async callers."""

    def __init__(self, memory: Any) -> None:
        from memrl.memory import AsyncMemory, Memory

        if isinstance(memory, Memory):
            self.aio, self._blocking = memory.aio, memory
        elif isinstance(memory, AsyncMemory):
            self.aio, self._blocking = memory, None
        else:
            raise TypeError(f"expected a memrl Memory or AsyncMemory, got {type(memory).__name__}")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def sync(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run ``make()`` to completion from blocking code."""
        if self._blocking is not None:
            return self._blocking.submit(make()).result()
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(
                "a blocking call on an AsyncMemory from inside a running event loop would block that loop: "
                "use the async method (aget, aput, asearch, ainvoke, ...), or build on a memrl Memory"
            )
        return asyncio.run_coroutine_threadsafe(make(), self._private_loop()).result()

    async def run(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Await ``make()`` from async code."""
        if self._blocking is not None:
            return await asyncio.wrap_future(self._blocking.submit(make()))
        return await make()

    def _private_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="memrl-runner", daemon=True).start()
            return self._loop

    def close(self) -> None:
        """Stop the private loop thread (the memory itself is the caller's to close)."""
        with self._lock:
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._loop = None
