"""memrl's memory as LangChain tools and a LangChain retriever (``pip install 'memrl[langchain]'``).

    from memrl import Memory
    from memrl.integrations.langchain import memory_retriever, memory_tools

    memory = Memory("memrl.db")
    tools = memory_tools(memory, "alice")                    # add_memory, search_memories, ..., delete_memory
    agent = langchain.agents.create_agent(model, tools)      # or any framework that takes LangChain tools
    docs = memory_retriever(memory, "alice", top_k=4).invoke("where does Alice live")

The tools are memrl's own typed tools (:mod:`memrl.integrations.toolset`: the operations and schemas of the
REST API and the MCP server, plus ``remember`` and the other job tools when the memory has a job writer),
as ``StructuredTool`` s whose ``args_schema`` is the tool's JSON schema; a call is validated by memrl's
model, and a bad one comes back to the model as an error text (``Error in search_memories: ...``). Each
tool's message carries the text, its artifact the structured data (items, hits, jobs). The retriever runs
``search_memories`` with fixed settings (``top_k``, ``mode``, ``types``, ``filters``, ``threshold``) and
gives one ``Document`` per hit (content; metadata: id, type, scores, the item's metadata, ...).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memrl.errors import ValidationError
from memrl.integrations.running import need
from memrl.integrations.toolset import BoundTool, bind

_tools = need("langchain_core.tools", "langchain", "memrl.integrations.langchain")
_retrievers = need("langchain_core.retrievers", "langchain", "memrl.integrations.langchain")
_documents = need("langchain_core.documents", "langchain", "memrl.integrations.langchain")

__all__ = ["MemrlRetriever", "memory_retriever", "memory_tools"]


def _structured(bound: BoundTool) -> Any:
    def run(**arguments: Any) -> tuple[str, Any]:
        result = bound.call(arguments)
        return result.content, result.data

    async def arun(**arguments: Any) -> tuple[str, Any]:
        result = await bound.acall(arguments)
        return result.content, result.data

    return _tools.StructuredTool(
        name=bound.name, description=bound.description, args_schema=bound.parameters, func=run,
        coroutine=arun, response_format="content_and_artifact",
    )  # fmt: skip


def memory_tools(
    memory: Any, namespace: str, *, names: Sequence[str] | None = None, actor: str = "agent"
) -> list[Any]:
    """LangChain tools for ``namespace`` of ``memory`` (a ``Memory``, for blocking and async agents, or an
    ``AsyncMemory``); ``names``: only these operations (:func:`memrl.integrations.toolset.bind`)."""
    return [_structured(b) for b in bind(memory, namespace, names=names, actor=actor)]


class MemrlRetriever(_retrievers.BaseRetriever):
    """A LangChain retriever over one namespace: memrl's search, one ``Document`` per hit."""

    search: Any  #: the bound ``search_memories`` tool
    settings: dict[str, Any] = {}  #: its fixed arguments besides the query

    def _documents(self, result: Any) -> list[Any]:
        if not result.ok:
            raise ValidationError(result.error or result.content)
        docs = []
        for hit in result.data:
            meta = {k: v for k, v in hit.items() if k != "content"}
            docs.append(_documents.Document(page_content=hit["content"], metadata=meta, id=hit["id"]))
        return docs

    def _get_relevant_documents(self, query: str, *, run_manager: Any = None) -> list[Any]:
        return self._documents(self.search.call({"query": query, **self.settings}))

    async def _aget_relevant_documents(self, query: str, *, run_manager: Any = None) -> list[Any]:
        return self._documents(await self.search.acall({"query": query, **self.settings}))


def memory_retriever(memory: Any, namespace: str, *, top_k: int = 4, **settings: Any) -> MemrlRetriever:
    """A retriever of the ``top_k`` best memories of ``namespace``; ``settings``: ``mode``, ``types``,
    ``filters``, ``threshold`` (``search_memories``' own arguments, checked here)."""
    (search,) = bind(memory, namespace, names=["search_memories"])
    fixed = {"top_k": top_k, **settings}
    checked = search.tool.validate({"query": "-", **fixed})
    if not isinstance(checked, dict):
        raise ValidationError(checked.error or checked.content)
    return MemrlRetriever(search=search, settings=fixed)
