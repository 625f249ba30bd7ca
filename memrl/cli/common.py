"""Flags shared by commands that call a model or open a store."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

_ROLE = re.compile(r":(?:mod|class|func|meth|attr|data|obj|exc|ref|doc):`(~?)([^`<]*?)(?:\s*<[^>]*>)?`")


def plain(text: str) -> str:
    """reST as a terminal shows it: ``code`` as code, :role:`~a.b.C` as C (or its title), ``::`` as ``:``."""
    text = _ROLE.sub(lambda m: m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2), text)
    text = re.sub(r"``([^`]+)``", r"\1", text)
    text = re.sub(r"`([^`]+?)\s*<[^>]+>`_", r"\1", text)  # a link: its title
    return re.sub(r"(\S)::$", r"\1:", text, flags=re.M)


class PlainHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """A description kept as written (its lines and lists) but in plain text (:func:`plain`); option help too."""

    def _format_text(self, text: str) -> str:
        return super()._format_text(plain(text))

    def _expand_help(self, action: argparse.Action) -> str:
        return plain(super()._expand_help(action))


def add_llm_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--provider", default="local", help="local (offline SmolLM2, default), openai, scripted")
    g.add_argument("--model", help="model name, HF folder or hub id")
    g.add_argument(
        "--base-url", help="OpenAI-compatible server URL (vLLM, SGLang, Ollama, llama.cpp, memrl serve)"
    )
    g.add_argument("--llm-cache", help="SQLite file caching deterministic LLM calls")


def make_llm(args: argparse.Namespace, *, progress: str | None = None) -> Any:
    """The model the flags describe; with ``progress``, a bar on stderr counts its calls."""
    from memrl.llm import create_llm

    kw = {"base_url": args.base_url} if args.base_url else {}
    llm = create_llm(args.provider, args.model, cache=args.llm_cache, **kw)
    return CountingLLM(llm, progress) if progress else llm


class CountingLLM:
    """Forwards to an LLM and ticks a progress bar per call (for commands whose work is a chain of calls)."""

    def __init__(self, llm: Any, desc: str) -> None:
        from tqdm.auto import tqdm

        self.inner = llm
        self.bar = tqdm(desc=desc, unit="call")

    async def chat(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await self.inner.chat(*args, **kwargs)
        finally:
            self.bar.update(1)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def add_store_args(p: argparse.ArgumentParser, *, namespace_default: str | None = "default") -> None:
    g = p.add_argument_group("store")
    g.add_argument(
        "--db",
        default=os.environ.get("MEMRL_DB", "memrl.db"),
        help="memory store: a SQLite file or a postgresql:// URL",
    )
    g.add_argument("--namespace", "-n", default=namespace_default, help="namespace to act on")
    g.add_argument(
        "--embedder", default=os.environ.get("MEMRL_EMBEDDER", "minilm"), help="minilm, hashing, openai:MODEL"
    )


def add_conversation_args(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    g = p.add_argument_group("conversation")
    g.add_argument(
        "--dataset", default="sample",
        help="locomo, longmemeval, perltqa, hotpotqa, ruler-hotpotqa, ruler-locomo or sample (default)",
    )  # fmt: skip
    g.add_argument("--data-path", help="data file or folder")
    g.add_argument("--conv-id", help="conversation id (default: the first one)")


def load_conversation(args: argparse.Namespace) -> Any:
    from memrl.data import load_conversations
    from memrl.errors import ValidationError

    convs, _ = load_conversations(args.dataset, args.data_path)
    if args.conv_id is None:
        return convs[0]
    for c in convs:
        if c.id == args.conv_id:
            return c
    raise ValidationError(
        f"no conversation {args.conv_id!r} in {args.dataset}; ids: {', '.join(c.id for c in convs[:12])}"
    )


def emit_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
