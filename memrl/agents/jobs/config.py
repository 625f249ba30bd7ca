"""How a :class:`~memrl.agents.jobs.JobRunner` treats jobs: the destruction budget, the queue caps, the
waits on a busy store, the heartbeats of processes sharing one store (``memrl serve memory`` flags map
onto these fields; docs/service.md describes them)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from memrl.config import option
from memrl.errors import ValidationError


@dataclass(frozen=True)
class JobConfig:
    """How the runner treats jobs."""

    destruction_budget: float = option(
        0.5,
        "a job may take away at most this share of its namespace's content (word characters: deleted memories "
        "whole, the words updates and merges drop), and always one memory's worth, unless allow_mass_delete",
    )
    max_delete_share: float | None = option(None, "deprecated: the old name of destruction_budget")
    max_queued_jobs: int = option(16, "jobs one namespace may have queued at once (more: 429)")
    max_queued_bytes: int = option(8_000_000, "bytes of requests one namespace may have queued (more: 429)")
    max_queued_jobs_per_client: int = option(
        32, "jobs one client (token) may have queued in this process at once (more: 429)"
    )
    max_queued_bytes_per_client: int = option(
        16_000_000, "bytes of requests one client (token) may have queued in this process (more: 429)"
    )
    commit_wait: float = option(
        30.0,
        "seconds a job keeps retrying a step that found the store busy (locked by another writer; its commit "
        "included) before it fails with nothing applied",
    )
    keep_finished: int = option(1000, "finished jobs whose completion events this process keeps for waiters")
    progress_every: float = option(0.5, "seconds between two writes of a running job's progress")
    heartbeat_every: float = option(5.0, "seconds between two heartbeats of this process's running jobs")
    stale_after: float = option(
        120.0, "a job of another host with no heartbeat for this long is taken as dead (failed, not applied)"
    )
    claim_poll: float = option(
        0.2, "seconds between two tries to start a job whose namespace is busy elsewhere"
    )
    wait_poll: float = option(0.25, "seconds between two looks at a job another process runs, while waiting")
    store_threads: int = option(4, "threads doing the runner's store work (off the event loop)")

    def __post_init__(self) -> None:
        if self.max_delete_share is not None:
            warnings.warn(
                "JobConfig(max_delete_share=) is now destruction_budget", DeprecationWarning, stacklevel=3
            )
            object.__setattr__(self, "destruction_budget", self.max_delete_share)
            object.__setattr__(self, "max_delete_share", None)
        if not 0 <= self.destruction_budget <= 1:
            raise ValidationError("destruction_budget must be between 0 and 1", field="destruction_budget")
        if not 0 < self.heartbeat_every < self.stale_after:
            raise ValidationError(
                "heartbeat_every must be > 0 and below stale_after", field="heartbeat_every"
            )
        for name in ("max_queued_jobs", "max_queued_bytes", "max_queued_jobs_per_client",
                     "max_queued_bytes_per_client", "store_threads"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ValidationError(f"{name} must be at least 1", field=name)
        if self.commit_wait < 0:
            raise ValidationError("commit_wait must be >= 0", field="commit_wait")
