"""Counting a model's tokens and knowing its window: what the full-context readers (``memrl eval ruler``'s
``full`` reader, ``memrl eval --builder full``) need to decide what fits.

    count = token_counter("model", llm)      # the local model's tokenizer, else SmolLM2-135M-Instruct's
    window = model_window(llm)               # the local model's context length; None for a server
"""

from __future__ import annotations

from typing import Any

from memrl.data.ruler.synthetic import TokenCounter


def token_counter(spec: str, llm: Any = None) -> TokenCounter:
    """``whitespace`` (words), a tokenizer folder, or ``model``: the local model's own tokenizer, else the
    offline SmolLM2-135M-Instruct's (the default local model; loads transformers, not the weights)."""
    if spec == "whitespace":
        return lambda text: len(text.split())
    tokenizer = None
    if spec == "model":
        from memrl.llm.templated import TemplatedLLM

        inner = getattr(llm, "inner", llm)
        if isinstance(inner, TemplatedLLM):
            tokenizer = inner.tokenizer
        else:
            from memrl.llm.local.hf_models import ensure_local_model

            spec = ensure_local_model(None)
    if tokenizer is None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(spec)
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))


def model_window(llm: Any) -> int | None:
    inner = getattr(llm, "inner", llm)
    engine = getattr(inner, "engine", None)
    return getattr(engine, "context_length", None)
