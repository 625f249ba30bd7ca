"""memrl's memory as function tools of the OpenAI Agents SDK (``pip install 'memrl[openai-agents]'``).

    from agents import Agent, Runner
    from memrl import Memory
    from memrl.integrations.openai_agents import memory_tools

    agent = Agent(name="assistant", instructions="...", tools=memory_tools(Memory("memrl.db"), "alice"))
    result = await Runner.run(agent, "Remember that I moved to Lisbon")

Each tool is one of memrl's typed tools (:mod:`memrl.integrations.toolset`: the REST API's and MCP server's
operations and schemas, plus ``remember`` and the job tools when the memory has a job writer) as a
``FunctionTool`` whose parameters are that tool's JSON schema (not in the SDK's strict mode: optional
arguments may be left out); the model's arguments are validated by memrl, and what comes back to the model
is the tool's text, an error text it can act on for a bad call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memrl.integrations.running import need
from memrl.integrations.toolset import BoundTool, bind

_agents = need("agents", "openai-agents", "memrl.integrations.openai_agents")

__all__ = ["memory_tools"]


def _function_tool(bound: BoundTool) -> Any:
    async def invoke(context: Any, arguments: str) -> str:
        return (await bound.acall(arguments)).content

    return _agents.FunctionTool(
        name=bound.name, description=bound.description, params_json_schema=bound.parameters,
        on_invoke_tool=invoke, strict_json_schema=False,
    )  # fmt: skip


def memory_tools(
    memory: Any, namespace: str, *, names: Sequence[str] | None = None, actor: str = "agent"
) -> list[Any]:
    """Agents SDK tools for ``namespace`` of ``memory`` (a ``Memory`` or an ``AsyncMemory`` on the agent's
    loop); ``names``: only these operations (:func:`memrl.integrations.toolset.bind`)."""
    return [_function_tool(b) for b in bind(memory, namespace, names=names, actor=actor)]
