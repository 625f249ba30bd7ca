"""mem0 (the ``mem0ai`` package, ``pip install 'memrl[mem0]'``) through the harness: ``--system mem0``
(``infer=True``: mem0's LLM extracts facts from each session, its published mode) or ``--system mem0-raw``
(``infer=False``: every message stored as it is, no LLM on the write path).

mem0 runs in-process with its defaults otherwise: its OpenAI LLM and embedder pointed at the harness's
metering proxy (``--system-base-url``, ``--system-model``, ``--system-embed-model``/``-dims``), a local
on-disk Qdrant collection and its SQLite history in the run's folder, one ``user_id`` per conversation.
Telemetry is off (``MEM0_TELEMETRY=False``: these machines reach no network). A session is one
``Memory.add(messages, user_id=..., infer=...)``, the session's date in the first message and in the
metadata; a question is one ``Memory.search(question, filters={"user_id": ...}, top_k=k)``, each memory
shown with its session's date.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from memrl.data.types import Conversation, Question, Session
from memrl.errors import ConfigError
from memrl.eval.systems.base import Cost, MeteredSystem, SystemSettings, session_messages


def _import_mem0(home: Path) -> Any:
    """mem0's ``Memory``, with its telemetry off and its home folder (``MEM0_DIR``, created at import) in
    the run's folder unless set. mem0 reads ``MEM0_TELEMETRY`` once, at import: if something imported it
    earlier with telemetry on, its flags are turned off here too, so no event is ever sent."""
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    os.environ.setdefault("MEM0_DIR", str(home))
    try:
        import mem0.memory.main as main
        import mem0.memory.telemetry as telemetry
        from mem0 import Memory
    except ImportError:
        raise ConfigError("--system mem0 needs the mem0ai package: pip install 'memrl[mem0]'") from None
    main.MEM0_TELEMETRY = telemetry.MEM0_TELEMETRY = False
    client = getattr(telemetry, "client_telemetry", None)
    if getattr(client, "posthog", None) is not None:
        client.posthog = None
    return Memory


class Mem0System(MeteredSystem):
    """mem0's ``Memory`` with ``infer`` on (``mem0``) or off (``mem0-raw``)."""

    def __init__(self, settings: SystemSettings, *, infer: bool = True) -> None:
        self.name = "mem0" if infer else "mem0-raw"
        super().__init__(settings)
        self.infer = infer
        store = Path(settings.data_dir or ".") / f"{self.name}-store"
        store.mkdir(parents=True, exist_ok=True)
        Memory = _import_mem0(store / "home")
        key, url = settings.api_key, self.meter.base_url
        self.memory = Memory.from_config({
            "llm": {"provider": "openai", "config": {"model": settings.model or "gpt-4o-mini", "temperature": 0.0,
                                                      "api_key": key, "openai_base_url": url}},
            "embedder": {"provider": "openai", "config": {"model": settings.embed_model, "api_key": key,
                                                           "openai_base_url": url, "embedding_dims": settings.embed_dims}},
            "vector_store": {"provider": "qdrant", "config": {"collection_name": "memrl", "path": str(store / "qdrant"),
                                                               "embedding_model_dims": settings.embed_dims, "on_disk": True}},
            "history_db_path": str(store / "history.db"),
        })  # fmt: skip

    async def ingest_session(self, conversation: Conversation, session: Session) -> Cost:
        messages = session_messages(conversation, session)
        meta = {"session": session.index, "date": session.date_text or ""}

        async def work() -> Any:
            return await asyncio.to_thread(self.memory.add, messages, user_id=conversation.id, infer=self.infer,
                                           metadata=meta)  # fmt: skip

        _, cost = await self.metered(work)
        return cost

    async def search(
        self, conversation: Conversation, question: Question, top_k: int
    ) -> tuple[list[str], Cost]:
        async def work() -> Any:
            return await asyncio.to_thread(self.memory.search, question.question,
                                           filters={"user_id": conversation.id}, top_k=top_k)  # fmt: skip

        found, cost = await self.metered(work)
        lines = []
        for r in (found or {}).get("results", [])[:top_k]:
            date = (r.get("metadata") or {}).get("date")
            text = str(r["memory"])
            lines.append(f"[{date}] {text}" if date and not text.startswith(f"[{date}]") else text)
        return lines, cost

    async def close(self) -> None:
        close = getattr(getattr(self.memory, "vector_store", None), "client", None)
        if close is not None and hasattr(close, "close"):
            close.close()
        await super().close()
