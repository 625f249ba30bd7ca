"""Which process runs a job, and whether it is still alive: the owners of several server processes sharing
one store (see :mod:`memrl.agents.jobs`).

An owner is ``host:pid:random``. A job whose owner is dead (on this host: its pid is gone or, in this
process, its runner closed; on another host: no heartbeat for ``stale_after`` seconds) is failed by any live
runner and its scratch clone dropped."""

from __future__ import annotations

import os
import socket
import time
import uuid

from memrl.memory.jobs import Job

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
