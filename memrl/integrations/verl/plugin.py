"""The ``verl.plugins`` entry point: ``import verl`` imports this module in every process (driver and Ray
workers), which registers memrl's agent loops with verl's ``@register`` (``memagent``, ``memupdate``,
``membuilder``). Nothing else happens on import.

Declared in memrl's ``pyproject.toml``::

    [project.entry-points."verl.plugins"]
    memrl = "memrl.integrations.verl.plugin"

**A plugin that fails to import is silent in verl 0.9.1**: ``verl/__init__.py`` catches the exception and
logs it at DEBUG (``logging.getLogger(__name__).debug("Failed to load plugin ...")``), and the run later
stops with "Agent loop memagent not registered". memrl does not rely on this path alone: the launch
scripts import this module on the driver first (``python -m memrl.integrations.verl.resources``, which
raises with the real error), and ``agent_loops.yaml`` names each loop by ``_target_``, so verl's workers
import ``memrl.integrations.verl.loops`` through Hydra and a broken install raises there, with its cause.
"""

from __future__ import annotations

from memrl.integrations.verl import loops as loops  # noqa: F401  (registration happens on import)

AGENT_LOOPS = ("memagent", "memupdate", "membuilder")
