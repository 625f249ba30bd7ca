"""Which process runs a job, and whether it is still alive: the owners of several server processes sharing
one store (see :mod:`memrl.agents.jobs`).

An owner is ``host:pid:random``. A job whose owner is dead (on this host: its pid is gone or, in this
process, its runner closed; on another host: no heartbeat for ``stale_after`` seconds) is failed by any live
runner and its scratch clone dropped. :class:`Liveness` is the runner's side of it: its heartbeat, the
reaping of dead processes' jobs, and catching up on what a busy store kept from being written."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from typing import Any

from memrl.errors import MemrlError
from memrl.memory.jobs import Job

log = logging.getLogger("memrl.agents.jobs")

#: Owners of the runners open in this process (a job of this pid whose owner is not here was left by a
#: runner that closed or crashed).
LIVE_OWNERS: set[str] = set()
HOST = socket.gethostname()


def new_owner() -> str:
    return f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def dead(job: Job, stale_after: float) -> bool:
    """Whether the process running ``job`` is gone (see the module docstring)."""
    if job.owner is None:  # a row from before owners were recorded
        return True
    host, _, rest = job.owner.partition(":")
    pid = rest.partition(":")[0]
    silent = job.heartbeat_at is None or job.heartbeat_at < time.time() - stale_after
    if host == HOST and pid.isdigit():
        if int(pid) == os.getpid():
            return job.owner not in LIVE_OWNERS
        # its pid tells (a long model call may delay a heartbeat); a pid reused by another program
        # after a crash is caught by a silence ten times the limit
        long_silent = job.heartbeat_at is None or job.heartbeat_at < time.time() - 10 * stale_after
        return not pid_alive(int(pid)) or long_silent
    return silent


class Liveness:
    """The heartbeat side of :class:`~memrl.agents.jobs.JobRunner` (a mixin: the runner supplies its table,
    store work, tasks, config and owner)."""

    table: Any
    work: Any
    config: Any
    owner: str
    _tasks: dict[str, asyncio.Task]
    _unwritten: dict[str, tuple[str, str, dict[str, Any] | None]]
    _undropped: set[str]

    def _drop(self, job_id: str, scratch: str | None) -> None:  # pragma: no cover - the runner's
        raise NotImplementedError

    def _dead(self, job: Job) -> bool:
        """Whether the process running ``job`` is gone (:func:`dead`)."""
        return dead(job, self.config.stale_after)

    def _reap(self) -> list[str]:
        failed = self.table.reap(self._dead)
        for job in failed:
            self._drop(job.id, job.scratch)
        return [j.id for j in failed]

    async def _beat_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_every)
            try:
                for job_id in await self.work.off(self.table.beat, self.owner):  # finished elsewhere: stop it
                    task = self._tasks.get(job_id)
                    if task is not None:
                        task.cancel()
                await self.work.off(self._reap)
                await self.work.off(self._catch_up)
            except MemrlError:  # the store is busy or gone for a moment: the next beat tries again
                log.warning("job heartbeat failed", exc_info=True)

    def _catch_up(self) -> None:
        """Store what a busy store kept from being stored (a job's end, a clone to drop), and fail a job the
        table says this runner runs but which has no task here (its end could not be written)."""
        for job_id, (status, error, result) in list(self._unwritten.items()):
            self.table.close_unfinished(job_id, status, error=error, result=result)
            self._unwritten.pop(job_id, None)
        for job_id in self.table.running_of(self.owner):
            if job_id not in self._tasks:
                why = "interrupted: its end could not be recorded; nothing it did was applied"
                self.table.close_unfinished(job_id, "failed", error=why)
        for job_id in list(self._undropped):
            self._drop(job_id, None)
            self._undropped.discard(job_id)
