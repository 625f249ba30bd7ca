"""A job runner's store work, off the event loop: a few threads of its own, retries while the store is busy,
and the messages a job may show (no path, host or SQL).

A store locked by another process (SQLite's write lock, a Postgres namespace lock) makes a write wait up to
the store's busy timeout; on the event loop that wait froze every request of a server. Here the wait holds
one of the runner's threads; :meth:`StoreWork.patient` retries a busy step for ``commit_wait`` seconds,
then raises :class:`~memrl.errors.BusyError` saying nothing was applied."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from memrl.errors import BusyError, public_message

T = TypeVar("T")


class StoreWork:
    """The store threads of one runner (``threads`` of them) and its patience with a busy store."""

    def __init__(self, store: Any, threads: int, commit_wait: float) -> None:
        self.store = store
        self.commit_wait = commit_wait
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="memrl-jobs")

    async def off(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on one of the store threads (the event loop stays free)."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, partial(fn, *args, **kwargs))

    async def patient(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """:meth:`off`, retried while the store is busy, for ``commit_wait`` seconds at most; then a
        :class:`BusyError` naming the step (``what``) and saying nothing was applied."""
        deadline = time.monotonic() + self.commit_wait
        pause = 0.05
        while True:
            try:
                return await self.off(fn, *args, **kwargs)
            except BusyError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BusyError(
                        f"the store stayed busy (locked by another writer) for {self.commit_wait:g} s at the "
                        f"job's {what}; nothing was applied. Retry the job"
                    ) from None
                await asyncio.sleep(min(pause, left))
                pause = min(1.0, pause * 2)

    def public(self, text: str) -> str:
        """``text`` as a job may show it (:func:`memrl.errors.public_message`)."""
        return public_message(text, (self.store.path,))

    def public_event(self, event: dict[str, Any]) -> dict[str, Any]:
        reason = event.get("reason")
        return {**event, "reason": self.public(reason)} if isinstance(reason, str) else event

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
