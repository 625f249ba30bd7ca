"""Other memory systems through the same harness: the :class:`MemorySystem` interface (ingest a session,
search a question, say what it cost) and its adapters, imported only when asked for by name::

    system = create_system("mem0", SystemSettings(base_url="http://localhost:8000/v1", model="gpt-4o-mini"))

Names (``memrl eval --system NAME``): ``mem0`` (mem0ai, ``infer=True``), ``mem0-raw`` (``infer=False``),
``langmem`` (LangMem's memory store manager), ``memrl:BUILDER`` (memrl's builders behind the interface).
Heavy adapters are optional extras: ``pip install 'memrl[mem0]'``, ``'memrl[langmem]'``. Graphiti is not
among them: see docs/evaluation.md (Other memory systems).
"""

from __future__ import annotations

from memrl.eval.systems.base import Cost, MemorySystem, SystemSettings

__all__ = ["SYSTEMS", "Cost", "MemorySystem", "SystemSettings", "create_system"]

#: Systems by name (``memrl:BUILDER`` for any of memrl's builders).
SYSTEMS = ("mem0", "mem0-raw", "langmem", "memrl:raw", "memrl:membuilder", "memrl:annotations")


def create_system(name: str, settings: SystemSettings) -> MemorySystem:
    """The system called ``name`` (see :data:`SYSTEMS`)."""
    from memrl.errors import ConfigError

    if name in ("mem0", "mem0-raw"):
        from memrl.eval.systems.mem0_system import Mem0System

        return Mem0System(settings, infer=name == "mem0")
    if name == "langmem":
        from memrl.eval.systems.langmem_system import LangMemSystem

        return LangMemSystem(settings)
    if name.startswith("memrl:"):
        import dataclasses

        from memrl.eval.systems.memrl_system import MemrlSystem

        return MemrlSystem(dataclasses.replace(settings, builder=name.split(":", 1)[1]))
    raise ConfigError(f"unknown memory system {name!r}; choose memrl, {', '.join(SYSTEMS)}")
