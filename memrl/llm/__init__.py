"""memrl.llm: one async chat protocol over every LLM back-end, with tools and structured output.

Back-ends: ``openai`` (any OpenAI-compatible server: OpenAI, vLLM, SGLang, Ollama, llama.cpp, ``memrl
serve``), ``local`` (transformers, offline SmolLM2 by default; xgrammar constrained decoding; token ids and
logprobs for RL), ``scripted`` (replays replies, for tests). ``CachedLLM`` adds a shared SQLite cache of
deterministic calls; ``serve`` puts any back-end behind an OpenAI-compatible HTTP endpoint::

    from memrl.llm import create_llm
    llm = create_llm("local")                      # or create_llm("openai", "gpt-4o-mini", cache="c.sqlite")
    reply = llm.chat_sync([{"role": "user", "content": "Hello"}])

Everything is imported lazily: ``import memrl.llm`` loads neither torch nor the openai SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "LLM": "memrl.llm.base",
    "ChatResponse": "memrl.llm.base",
    "LLMProviderError": "memrl.llm.base",
    "Message": "memrl.llm.base",
    "SamplingParams": "memrl.llm.base",
    "ToolCall": "memrl.llm.base",
    "Usage": "memrl.llm.base",
    "create_llm": "memrl.llm.registry",
    "register_provider": "memrl.llm.registry",
    "TemplatedLLM": "memrl.llm.templated",
    "TokenEngine": "memrl.llm.tokens",
    "ChatRequest": "memrl.llm.base",
    "CachedLLM": "memrl.llm.cache",
    "OpenAIConfig": "memrl.llm.openai_backend",
    "OpenAILLM": "memrl.llm.openai_backend",
    "LocalLLM": "memrl.llm.local",
    "ScriptedLLM": "memrl.llm.scripted",
    "ScriptExhaustedError": "memrl.llm.scripted",
    "LLMServer": "memrl.llm.server",
    "serve": "memrl.llm.server",
    "run_server": "memrl.llm.server",
}

__all__ = [
    "CachedLLM",
    "ChatRequest",
    "ChatResponse",
    "LLM",
    "LLMProviderError",
    "LLMServer",
    "LocalLLM",
    "Message",
    "OpenAIConfig",
    "OpenAILLM",
    "SamplingParams",
    "ScriptExhaustedError",
    "TemplatedLLM",
    "TokenEngine",
    "ScriptedLLM",
    "ToolCall",
    "Usage",
    "create_llm",
    "register_provider",
    "run_server",
    "serve",
]

if TYPE_CHECKING:  # pragma: no cover
    from memrl.llm.base import (
        LLM,
        ChatResponse,
        LLMProviderError,
        Message,
        SamplingParams,
        ToolCall,
        Usage,
    )
    from memrl.llm.cache import CachedLLM
    from memrl.llm.local import LocalLLM
    from memrl.llm.openai_backend import OpenAIConfig, OpenAILLM
    from memrl.llm.registry import create_llm, register_provider
    from memrl.llm.scripted import ScriptedLLM, ScriptExhaustedError
    from memrl.llm.server import LLMServer, run_server, serve


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'memrl.llm' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
