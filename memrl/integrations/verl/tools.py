"""MemUpdate's six memory tools as verl tools (``verl.tools.base_tool.BaseTool``), for verl's stock
``tool_agent`` loop and anything else that loads tools through verl's tool registry.

``configs/verl/memupdate_tools.yaml`` lists one :class:`MemrlTool` per tool with only its name
(``config: {type: native, tool: search_memory}``): the schema is memrl's own, derived from the typed
function (:data:`memrl.tools.memupdate.MEMUPDATE_TOOLS`), never copied into the yaml.

State: verl's ``ToolAgentLoop`` calls ``create``/``execute``/``release`` around every single call, so a
tool instance cannot hold an episode's memory. The episode's store is kept per trajectory instead, keyed by
``agent_data.request_id`` (verl passes ``agent_data`` to ``execute``), in this process, created on the
first call from the row's ``tools_kwargs`` (``create_kwargs``): ``{"db": "<sqlite file>", "namespace":
"<initial memory>"}`` (the episode works on a clone of that namespace) or ``{"conversation": "<memrl
conversation JSON>"}`` (MemUpdate's initial memory from its observations, in memory). At most
``max_episodes`` (default 256) episodes are kept per process, the oldest dropped first. memrl's own
``memupdate`` agent loop does not need any of this: it owns its store for exactly one episode.
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
        from memrl.memory.facade import AsyncMemory

        if create_kwargs.get("conversation"):
            from memrl.agents.memupdate import init_from_observations
            from memrl.data.types import Conversation

            conv = Conversation.from_dict(json.loads(create_kwargs["conversation"]))
            memory, ns = AsyncMemory(":memory:", embedder=embedder), f"{conv.id}@obs"
            await init_from_observations(memory, ns, conv)
        elif create_kwargs.get("db") and create_kwargs.get("namespace"):
            memory, ns = (
                AsyncMemory(create_kwargs["db"], embedder=embedder),
                f"{create_kwargs['namespace']}@verl-{key[:12]}",
            )
            await memory.clone(create_kwargs["namespace"], ns, overwrite=True)
        else:
            raise ConfigError("memrl verl tools need create_kwargs {'db', 'namespace'} or {'conversation'} in the "
                              "row's extra_info.tools_kwargs")  # fmt: skip
        ctx = MemoryContext(memory, ns, actor="memupdate", rng=random.Random(0))
        with self.lock:
            self.contexts[key] = ctx
            old = [self.contexts.popitem(last=False)[1] for _ in range(max(0, len(self.contexts) - self.max))]
        for o in old:
            await o.memory.close()
        return ctx


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
