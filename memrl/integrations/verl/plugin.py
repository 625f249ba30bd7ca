"""The ``verl.plugins`` entry point: ``import verl`` imports this module in every process (driver and Ray
workers), which registers memrl's agent loops with verl's ``@register`` (``memagent``, ``memupdate``,
``membuilder``). Nothing else happens on import.

Declared in memrl's ``pyproject.toml``::

    [project.entry-points."verl.plugins"]
    memrl = "memrl.integrations.verl.plugin"
"""

from __future__ import annotations

from memrl.integrations.verl import loops as loops  # noqa: F401  (registration happens on import)

AGENT_LOOPS = ("memagent", "memupdate", "membuilder")
