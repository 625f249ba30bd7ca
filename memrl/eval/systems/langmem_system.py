"""LangMem (``langmem``, LangChain's memory library; ``pip install 'memrl[langmem]'``) through the harness:
``--system langmem``.

Its memory store manager (``create_memory_store_manager``: searches the store for related memories, then
its LLM, through trustcall's tool-calling extractor, writes new memories and updates old ones) over
LangGraph's ``InMemoryStore`` with a vector index, one namespace per conversation. Both its chat model
(``langchain_openai.ChatOpenAI``) and its embedder (``OpenAIEmbeddings``, without tiktoken's length check,
which would download an encoding) are pointed at the harness's metering proxy. A session is one
``manager.ainvoke({"messages": ...})``; a question is one ``store.asearch(namespace, query=..., limit=k)``.
The store lives in memory: a run ingests and answers in one process (no ``--mode answer`` later).
"""

from __future__ import annotations

from typing import Any

from memrl.data.types import Conversation, Question, Session
from memrl.errors import ConfigError
from memrl.eval.systems.base import Cost, MeteredSystem, SystemSettings, session_messages


class LangMemSystem(MeteredSystem):
    name = "langmem"

    def __init__(self, settings: SystemSettings) -> None:
        super().__init__(settings)
        try:
            from langchain_openai import ChatOpenAI, OpenAIEmbeddings
            from langgraph.store.memory import InMemoryStore
            from langmem import create_memory_store_manager
        except ImportError as e:
            raise ConfigError(f"--system langmem needs langmem and langchain-openai ({e}): "
                              "pip install 'memrl[langmem]'") from None  # fmt: skip
        url, key = self.meter.base_url, settings.api_key
        model = ChatOpenAI(model=settings.model or "gpt-4o-mini", base_url=url, api_key=key, temperature=0)
        embeddings = OpenAIEmbeddings(model=settings.embed_model, base_url=url, api_key=key,
                                      dimensions=None, check_embedding_ctx_length=False)  # fmt: skip
        self.store = InMemoryStore(index={"dims": settings.embed_dims, "embed": embeddings})
        self.manager = create_memory_store_manager(
            model, namespace=("memories", "{conversation}"), store=self.store
        )

    @staticmethod
    def _config(conversation: Conversation) -> dict[str, Any]:
        return {"configurable": {"conversation": conversation.id}}

    async def ingest_session(self, conversation: Conversation, session: Session) -> Cost:
        messages = session_messages(conversation, session)

        async def work() -> Any:
            return await self.manager.ainvoke({"messages": messages}, config=self._config(conversation))

        _, cost = await self.metered(work)
        return cost

    async def search(
        self, conversation: Conversation, question: Question, top_k: int
    ) -> tuple[list[str], Cost]:
        async def work() -> Any:
            return await self.store.asearch(
                ("memories", conversation.id), query=question.question, limit=top_k
            )

        items, cost = await self.metered(work)
        lines = []
        for it in items:
            content = (it.value or {}).get("content")
            lines.append(str(content.get("content", content)) if isinstance(content, dict) else str(content))
        return lines, cost
