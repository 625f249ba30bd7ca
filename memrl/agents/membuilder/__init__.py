"""MemBuilder (arXiv 2601.05488): four LLM agents per session, one per memory type, write long-term memory
(``from memrl.agents.membuilder import MemBuilderAgent, MemBuilderConfig``).

- ``agent``: :class:`MemBuilderAgent`, the four agents of a session and the core-memory compression;
- ``config``: :class:`MemBuilderConfig`, every knob of the agents; ``schema``: their JSON schemas narrowed
  to a token budget; ``context``: what each agent is shown of the memory; ``prompts``: their prompt texts;
- ``experts``: the annotation expert (the data set's annotations written as MemBuilder actions, SFT's
  targets) and ``annotations``: the builder that runs the four agents with it, no model;
- ``adrpo``: ADRPO, a freshly built session scored with questions about it (the trainers' reward).

Before this package these were flat modules (``memrl.agents.membuilder_config``, ``memrl.agents.adrpo``,
``memrl.agents.prompts.membuilder``, ...); those paths still import, with a ``DeprecationWarning``
(:mod:`memrl.agents._moved`).
"""

from memrl.agents.membuilder.agent import OPERATIONS, ORDER, Context, MemBuilderAgent, MemBuilderConfig

__all__ = ["OPERATIONS", "ORDER", "Context", "MemBuilderAgent", "MemBuilderConfig"]
