"""The flat module paths memrl.agents had before its sub-packages, kept importable for one release.

``from memrl.agents.job_queue import ClientQueues`` still works and warns (``DeprecationWarning``) with the
new path (``memrl.agents.jobs.queue``); the module it gives holds the new module's names. Installed by
``memrl.agents``'s ``__init__``; the finder is :mod:`memrl._moved`'s. ``memrl.agents.jobs``,
``memrl.agents.membuilder`` and ``memrl.agents.memupdate`` were modules and are packages now: their
``__init__`` exports the names code imported from them. ``memrl.agents.prompts`` held only MemBuilder's
prompts.
"""

from __future__ import annotations

from memrl import _moved

#: old module (under memrl.agents) -> the modules its names now live in, the main one first.
MOVED: dict[str, tuple[str, ...]] = {
    "job_config": ("jobs.config",), "job_kinds": ("jobs.kinds",), "job_owners": ("jobs.owners",),
    "job_progress": ("jobs.progress",), "job_queue": ("jobs.queue",), "job_store": ("jobs.work",),
    "job_watch": ("jobs.watch",), "write_check": ("jobs.write_check",),
    "membuilder_config": ("membuilder.config",), "membuilder_context": ("membuilder.context",),
    "membuilder_schema": ("membuilder.schema",), "prompts": ("membuilder.prompts",),
    "prompts.membuilder": ("membuilder.prompts",), "adrpo": ("membuilder.adrpo",),
    "experts": ("membuilder.experts",), "annotations": ("membuilder.annotations",),
    "memupdate_config": ("memupdate.config",),
}  # fmt: skip
PACKAGE = "memrl.agents"


def install() -> None:
    """Add the finder once (idempotent)."""
    _moved.install(PACKAGE, MOVED)
