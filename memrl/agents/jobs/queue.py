"""Per-client caps on a runner's queue: how many jobs, and how many bytes of requests, one client (a
server's token) may have waiting in this process at once. Past either, :class:`~memrl.errors.LimitError`
(a 429 with ``Retry-After``), except for a retry of a request already accepted (its idempotency key and the
same request), which is answered with its job. What a queued job holds here is its size, not its request
(the request waits in the store). Per-namespace caps live in the store (:class:`memrl.memory.jobs.QueueLimits`:
counted in the ``jobs`` table, so across processes)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager

from memrl.errors import LimitError


class ClientQueues:
    """Queued jobs per client: ``(client, bytes)`` per job id."""

    def __init__(self, max_jobs: int, max_bytes: int) -> None:
        self.max_jobs, self.max_bytes = max_jobs, max_bytes
        self._held: dict[str, tuple[str, int]] = {}
        self._places = itertools.count()

    def over(self, client: str, size: int) -> str | None:
        """Why one more job of ``size`` bytes from ``client`` is refused (None: it fits)."""
        mine = [b for c, b in self._held.values() if c == client]
        if len(mine) >= self.max_jobs:
            return f"{len(mine)} jobs queued, the most one client may have ({self.max_jobs})"
        if sum(mine) + size > self.max_bytes:
            return (f"{sum(mine)} bytes of requests queued; this one ({size}) would pass the most one client may "
                    f"have ({self.max_bytes})")  # fmt: skip
        return None

    def refuse(self, client: str, why: str) -> LimitError:
        return LimitError(f"client {client!r} has {why}; retry once they ran", retry_after=5)

    @contextmanager
    def place(self, client: str, size: int) -> Iterator[None]:
        """Hold a place for a job being written (so two submissions at once cannot both take the last one)."""
        key = f"?{next(self._places)}"
        self._held[key] = (client, size)
        try:
            yield
        finally:
            self._held.pop(key, None)

    def add(self, job_id: str, client: str, size: int) -> None:
        self._held[job_id] = (client, size)

    def release(self, job_id: str) -> None:
        """The job left the queue (it runs, or it ended)."""
        self._held.pop(job_id, None)
