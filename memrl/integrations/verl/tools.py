"""MemUpdate's six memory tools as verl tools (``verl.tools.base_tool.BaseTool``), for verl's stock
``tool_agent`` loop and anything else that loads tools through verl's tool registry.

``memrl/resources/verl/memupdate_tools.yaml`` lists one :class:`MemrlTool` per tool with only its name
(``config: {type: native, tool: search_memory}``): the schema is memrl's own, derived from the typed
function (:data:`memrl.tools.memupdate.MEMUPDATE_TOOLS`), never copied into the yaml.

State: verl's ``ToolAgentLoop`` calls ``create``/``execute``/``release`` around every single call, so a
tool instance cannot hold an episode's memory. The episode's store is kept per trajectory instead, keyed by
``agent_data.request_id`` (verl passes ``agent_data`` to ``execute``), in this process, created on the
first call from the row's ``tools_kwargs`` (``create_kwargs``): ``{"db": "<sqlite file>", "namespace":
"<initial memory>"}`` (the episode works on a clone of that namespace) or ``{"conversation": "<memrl
conversation JSON>"}`` (MemUpdate's initial memory from its observations, in memory). At most
``max_episodes`` (default 256) episodes are kept per process, the oldest dropped first: a dropped episode's
clone is deleted from the database file (``memory.reset``), an in-memory store is simply closed; the
episodes still kept when the process ends leave their clones (``{namespace}@verl-<request id>``) in the
file. verl's ``ToolAgentLoop`` has no end-of-episode hook for tools (it calls ``release`` after every
call: ``verl/experimental/agent_loop/tool_agent_loop.py``, ``_call_tool``), so eviction is the only point
where an episode is known to be over.

**No reward on this path.** verl's stock ``tool_agent`` loop scores an episode with the reward function
on its decoded final response (``tool_agent_loop.py`` returns per-call ``tool_rewards`` only, from
``execute``); MemUpdate's reward needs the episode's store, which lives in the tools' process. memrl's
``compute_score`` therefore refuses ``update`` rows with a message naming the ``memupdate`` loop: train
MemUpdate with memrl's own loop (``agent_name: memupdate``, the default of ``configs/verl/memupdate.yaml``);
use these tools for tool-use rollouts and evaluation.
"""

from __future__ import annotations

import json
import random
import threading
from collections import OrderedDict
from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from memrl.errors import ConfigError
from memrl.integrations.verl.shared import shared_embedder
from memrl.tools.memupdate import MEMUPDATE_TOOLS, MemoryContext


class EpisodeStores:
    """Per-trajectory memory contexts of this process (see the module docstring)."""

    def __init__(self, max_episodes: int = 256) -> None:
        self.max = max_episodes
        self.contexts: OrderedDict[str, MemoryContext] = OrderedDict()
        self.lock = threading.Lock()

    async def get(self, key: str, create_kwargs: dict[str, Any], embedder: str) -> MemoryContext:
        with self.lock:
            ctx = self.contexts.get(key)
        if ctx is not None:
            return ctx
        from memrl.memory import AsyncMemory

        # what a memory's speaker metadata may be (any one short name when the conversation is unknown)
        speakers: tuple[str, ...] = ()
        if create_kwargs.get("conversation"):
            from memrl.agents.memupdate import init_from_observations
            from memrl.data.types import Conversation

            conv = Conversation.from_dict(json.loads(create_kwargs["conversation"]))
            memory, ns = AsyncMemory(":memory:", embedder=shared_embedder(embedder)), f"{conv.id}@obs"
            await init_from_observations(memory, ns, conv)
            speakers = tuple(conv.speakers)
        elif create_kwargs.get("db") and create_kwargs.get("namespace"):
            memory, ns = (
                AsyncMemory(create_kwargs["db"], embedder=shared_embedder(embedder)),
                f"{create_kwargs['namespace']}@verl-{key[:12]}",
            )
            await memory.clone(create_kwargs["namespace"], ns, overwrite=True)
        else:
            raise ConfigError("memrl verl tools need create_kwargs {'db', 'namespace'} or {'conversation'} in the "
                              "row's extra_info.tools_kwargs")  # fmt: skip
        ctx = MemoryContext(memory, ns, actor="memupdate", rng=random.Random(0), speakers=speakers)
        with self.lock:
            self.contexts[key] = ctx
            old = [self.contexts.popitem(last=False)[1] for _ in range(max(0, len(self.contexts) - self.max))]
        for o in old:
            await self.drop(o)
        return ctx

    @staticmethod
    async def drop(ctx: MemoryContext) -> None:
        """End an episode: delete its clone from a database file, close its store."""
        try:
            if ctx.memory.store.path != ":memory:":
                await ctx.memory.reset(namespace=ctx.namespace)
        finally:
            await ctx.memory.close()


EPISODES = EpisodeStores()


class MemrlTool(BaseTool):
    """One of MemUpdate's tools (``config["tool"]``), backed by memrl's typed function."""

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None = None) -> None:
        name = config.get("tool")
        if name not in MEMUPDATE_TOOLS.by_name:
            raise ConfigError(
                f"tool config needs tool: one of {sorted(MEMUPDATE_TOOLS.by_name)}, got {name!r}"
            )
        self.memrl_tool = MEMUPDATE_TOOLS.by_name[name]
        self.embedder = str(config.get("embedder", "minilm"))
        self.instances: dict[str, dict[str, Any]] = {}
        super().__init__(config, tool_schema)

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        return OpenAIFunctionToolSchema.model_validate(self.memrl_tool.schema)

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        instance_id, response = await super().create(instance_id)
        self.instances[instance_id] = dict(kwargs.get("create_kwargs") or {})
        return instance_id, response

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        agent_data = kwargs.get("agent_data")
        key = str(getattr(agent_data, "request_id", None) or instance_id)
        ctx = await EPISODES.get(key, self.instances.get(instance_id, {}), self.embedder)
        result = await self.memrl_tool.call(ctx, parameters)
        return ToolResponse(text=result.content), 0.0, {"ok": float(result.ok)}

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self.instances.pop(instance_id, None)
