"""memrl.agents: the agents that write memory, and what they record.

- ``base`` (what a builder is, the builders by name), ``trajectory`` (the one rollout record), ``raw`` (every
  turn stored, no LLM), ``union`` (raw turns and a builder's notes), ``enrich`` (an LLM pass over stored items);
- ``membuilder``: MemBuilder's four agents, their prompts and schemas, the annotation expert and builder, ADRPO;
- ``memupdate``: MemUpdate's tool episodes over a namespace;
- ``memagent`` and ``read_expert``: MemAgent, which reads a document chunk by chunk, and its expert reader;
- ``jobs``: the agents run as background jobs on a memory (:class:`~memrl.agents.jobs.JobRunner`).

The flat module paths of earlier releases (``memrl.agents.job_queue``, ``memrl.agents.membuilder_config``,
...) still import, with a ``DeprecationWarning`` (:mod:`memrl.agents._moved`).
"""

from memrl.agents import _moved

_moved.install()
