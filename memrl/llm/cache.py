"""A disk cache for deterministic LLM calls, shared between processes through SQLite (WAL).

A call is cached only when its reply is repeatable: greedy (``temperature == 0``) or with a fixed
``seed``. (So give each rollout of an RL group its own seed: rollouts sharing a seed share one reply.) The key is the SHA-256 of (provider, model, messages, tools, json_schema, tool_choice, sampling).
Only successful replies are stored, so an interrupted evaluation resumes where it stopped and retries what
failed::

    llm = CachedLLM(OpenAILLM("gpt-4o-mini"), "runs/llm-cache.sqlite")
    await llm.chat(messages)          # calls the server, stores the reply
    await llm.chat(messages)          # from disk (reply.cached is True), in this or any later process
    llm.hits, llm.misses
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from memrl.llm.base import LLM, ChatResponse, Message, SamplingParams, ToolChoice

SCHEMA = """
CREATE TABLE IF NOT EXISTS llm_cache (
    key TEXT PRIMARY KEY,
    llm TEXT NOT NULL,
    created REAL NOT NULL,
    response TEXT NOT NULL
)
"""


def cache_key(
    llm: LLM,
    messages: list[Message],
    tools: list[dict[str, Any]] | None,
    json_schema: dict[str, Any] | None,
    sampling: SamplingParams,
    tool_choice: str,
    grammar: str | None = None,
) -> str:
    """Stable across processes: canonical JSON (sorted keys) of everything that shapes the reply."""
    payload = {
        "provider": llm.provider,
        "model": llm.model,
        "messages": messages,
        "tools": tools or None,
        "json_schema": json_schema,
        "tool_choice": tool_choice if tools else None,
        "sampling": {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "seed": sampling.seed,
            "stop": list(sampling.stop or ()),
        },
    }
    if grammar is not None:  # absent otherwise: keys of existing caches stay valid
        payload["grammar"] = grammar
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class ResponseStore:
    """The SQLite table behind the cache. One connection, used from worker threads under a lock."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=30, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=30000")
        self._db.execute(SCHEMA)

    def get(self, key: str) -> ChatResponse | None:
        with self._lock:
            row = self._db.execute("SELECT response FROM llm_cache WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        resp = ChatResponse.from_dict(json.loads(row[0]))
        resp.cached = True
        return resp

    def put(self, key: str, llm_name: str, response: ChatResponse) -> None:
        data = json.dumps(response.to_dict(), ensure_ascii=False)
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO llm_cache (key, llm, created, response) VALUES (?, ?, ?, ?)",
                (key, llm_name, time.time(), data),
            )

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM llm_cache").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


class CachedLLM(LLM):
    """Wraps another LLM; deterministic calls are answered from (and saved to) an SQLite file."""

    def __init__(self, llm: LLM, path: str | Path) -> None:
        super().__init__(llm.model, max_concurrency=llm.max_concurrency)
        self.inner = llm
        self.provider = llm.provider  # type: ignore[misc]  # same identity, same keys
        self.supports_grammar = llm.supports_grammar  # type: ignore[misc]
        self.store = ResponseStore(path)
        self.hits = 0
        self.misses = 0

    async def chat(
        self,
        messages: list[Message],
        *,
        tools: list[dict[str, Any]] | None = None,
        json_schema: dict[str, Any] | None = None,
        sampling: SamplingParams | None = None,
        tool_choice: ToolChoice = "auto",
        grammar: str | None = None,
    ) -> ChatResponse:
        out = await self.chat_batch(
            [messages], tools=tools, json_schema=json_schema, sampling=sampling, tool_choice=tool_choice,
            grammar=grammar,
        )  # fmt: skip
        return out[0]

    async def _chat(self, messages: list[Message], **kw: Any) -> ChatResponse:  # pragma: no cover
        return await self.chat(messages, **kw)

    async def chat_batch(
        self,
        conversations: list[list[Message]],
        *,
        tools: list[dict[str, Any]] | None = None,
        json_schema: dict[str, Any] | None = None,
        sampling: SamplingParams | None = None,
        tool_choice: ToolChoice = "auto",
        return_exceptions: bool = False,
        grammar: str | None = None,
    ) -> list[Any]:
        """Cached replies are read first; the misses go to the wrapped LLM as one batch."""
        sampling = sampling or SamplingParams()
        kw: dict[str, Any] = {"tools": tools, "json_schema": json_schema, "sampling": sampling,
                              "tool_choice": tool_choice}  # fmt: skip
        if grammar is not None:
            kw["grammar"] = grammar
        if not sampling.deterministic:
            return await self.inner.chat_batch(conversations, **kw, return_exceptions=return_exceptions)
        keys = [cache_key(self.inner, m, tools, json_schema, sampling, tool_choice, grammar)
                for m in conversations]  # fmt: skip
        results: list[Any] = await asyncio.to_thread(lambda: [self.store.get(k) for k in keys])
        missing = [i for i, r in enumerate(results) if r is None]
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        if missing:
            fresh = await self.inner.chat_batch(
                [conversations[i] for i in missing], **kw, return_exceptions=return_exceptions
            )
            ok = [(keys[i], r) for i, r in zip(missing, fresh, strict=True) if isinstance(r, ChatResponse)]
            await asyncio.to_thread(lambda: [self.store.put(k, self.inner.name, r) for k, r in ok])
            for i, r in zip(missing, fresh, strict=True):
                results[i] = r
        return results

    async def aclose(self) -> None:
        await self.inner.aclose()

    def close(self) -> None:
        super().close()
        self.inner.close()
        self.store.close()
