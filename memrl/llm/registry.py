"""LLM back-ends by name: ``create_llm("local" | "openai" | "scripted", model, cache=...)``, and
``register_provider`` for plugins. Modules are imported only when their provider is asked for, so
``import memrl.llm`` stays light.

    from memrl.llm import create_llm
    llm = create_llm("openai", "gpt-4o-mini", base_url="http://localhost:8000/v1", cache="llm.sqlite")
"""

from __future__ import annotations

from typing import Any

from memrl.errors import ValidationError
from memrl.llm.base import LLM

# provider name -> "module:Class"; modules are imported only when that provider is asked for.
PROVIDERS: dict[str, str] = {
    "openai": "memrl.llm.openai_backend:OpenAILLM",
    "local": "memrl.llm.local:LocalLLM",
    "scripted": "memrl.llm.scripted:ScriptedLLM",
}


def register_provider(name: str, target: str) -> None:
    """Make ``create_llm(name, ...)`` build ``target`` (``"package.module:Class"``); for plugins."""
    if ":" not in target:
        raise ValidationError(f"target must look like 'package.module:Class', got {target!r}")
    PROVIDERS[name] = target


def create_llm(provider: str, model: str | None = None, *, cache: str | None = None, **kw: Any) -> LLM:
    """Build a back-end by name: ``create_llm("local")``, ``create_llm("openai", "gpt-4o-mini",
    base_url=...)``. ``cache=<sqlite path>`` wraps it in a :class:`~memrl.llm.cache.CachedLLM`."""
    import importlib

    from memrl.errors import ConfigError

    if provider not in PROVIDERS:
        raise ConfigError(f"unknown LLM provider {provider!r}; choose one of {sorted(PROVIDERS)}")
    module_name, cls_name = PROVIDERS[provider].split(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    llm: LLM = cls(model=model, **kw) if model is not None else cls(**kw)
    if cache:
        from memrl.llm.cache import CachedLLM

        llm = CachedLLM(llm, cache)
    return llm
