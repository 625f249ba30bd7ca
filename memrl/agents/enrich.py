"""Write-time enrichment: an LLM writes retrieval keys for stored items; search stays LLM-free.

For each item of a namespace (one per unit: the ``raw`` builder's turn and context views of one turn share
``metadata["unit"]``, the turn view is asked), the LLM sees the item's date, the previous item of its
session as context and the item's text, and replies with one line of comma-separated keywords: the people,
places, things, topics and dates it is about, with synonyms. The reply is parsed into keys and attached to
the item (:mod:`memrl.memory.store.keys`): a second BM25 view that search fuses with weight ``keys``
(:class:`~memrl.memory.search.hybrid.SearchOptions`); the item's text is never changed::

    from memrl.agents.enrich import enrich, llm_from_spec
    llm = llm_from_spec("local", cache="llm.sqlite")          # or "openai:gpt-4o-mini", base_url=...
    stats = await enrich(memory, "conv-26@raw", llm)
    hits = await memory.search("pottery class", namespace="conv-26@raw", keys=0.3)

Requests go out ``concurrency`` at a time (the local back-end batches concurrent calls), and keys are
written after each block of ``concurrency`` items, so an interrupted pass loses at most one block; with an
LLM cache (``CachedLLM``) even that block's finished replies are kept. A re-run skips items that already
have keys. A reply that parses to no keyword is counted (``malformed``, or ``empty`` when blank) and
skipped for that item; a failed call is counted (``failed``); only a block whose every call fails stops
the pass (the server is down: nothing to gain by going on).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from typing import Any

from memrl.errors import ConfigError, ProviderError
from memrl.memory import AsyncMemory
from memrl.memory.records import MemoryItem

SYSTEM = (
    "You write search keywords for chat messages. Reply with one line: 5 to 10 comma-separated keywords "
    "(people, places, things, topics, synonyms, the date). No sentences."
)
#: One worked example (a few-shot turn): small models copy its form.
EXAMPLE = (
    "Date: 3 June 2023\nPrevious: John: How was your weekend?\n"
    "Message: Anna: We hiked up Mount Tam with the dogs yesterday!",
    "Anna, John, Mount Tam, hiking, hike, mountain, dogs, pets, weekend, 2 June 2023",
)
_SPLIT = re.compile(r"[,;\n|]+|\s+[-*\u2022]\s+|^\s*[-*\u2022]\s*|\s*\d+[.)]\s+", re.MULTILINE)
_PREFIX = re.compile(r"^\s*(?:keywords?|keys|this message is about|topics?)\s*:\s*", re.IGNORECASE)
_WORD = re.compile(r"\w+")
_NONE = {"none", "(none)", "n/a", "na", "nothing", "no keywords"}


@dataclass(frozen=True)
class EnrichConfig:
    """How the enrichment pass asks the LLM and parses its replies."""

    max_tokens: int = 40  # reply budget: a line of keywords
    concurrency: int = 16  # requests in flight; keys are written after each block of this many
    context: bool = True  # show the previous item of the session in the prompt
    max_keys: int = 12  # keywords kept per item (after dropping duplicates)
    max_words: int = 5  # a longer "keyword" is a copied sentence: dropped
    new_only: bool = False  # drop keywords whose every word is already in the prompt (item or previous)

    def __post_init__(self) -> None:
        if self.max_tokens < 1 or self.concurrency < 1 or self.max_keys < 1 or self.max_words < 1:
            raise ConfigError("max_tokens, concurrency, max_keys and max_words must be >= 1")


@dataclass
class EnrichStats:
    """What one pass did. ``items``: units selected; ``done_before``: already had keys (resumed)."""

    namespace: str = ""
    items: int = 0
    done_before: int = 0
    enriched: int = 0
    empty: int = 0
    malformed: int = 0
    failed: int = 0
    nothing_new: int = 0  # new_only: every keyword was already in the prompt
    calls: int = 0
    time_s: float = 0.0

    @property
    def items_per_s(self) -> float:
        return self.calls / self.time_s if self.time_s > 0 else 0.0

    def add(self, other: EnrichStats) -> None:
        for f in fields(self):
            if f.name != "namespace":  # every other field is a count or a time: they add up
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "time_s": round(self.time_s, 2), "items_per_s": round(self.items_per_s, 3)}


def llm_from_spec(spec: str, *, base_url: str | None = None, cache: str | None = None, **kw: Any) -> Any:
    """An LLM from ``provider[:model]``: ``local`` (offline SmolLM2), ``local:PATH_OR_HUB_ID``,
    ``openai:MODEL`` (with ``base_url`` for any OpenAI-compatible server), ``scripted`` (tests).
    ``cache`` wraps it in the disk cache of deterministic calls, so a re-run is warm."""
    from memrl.llm import create_llm

    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError("enrichment LLM spec must look like local, local:MODEL or openai:MODEL")
    provider, _, model = spec.strip().partition(":")
    if base_url:
        kw["base_url"] = base_url
    return create_llm(provider, model or None, cache=cache, **kw)


def parse_keys(text: str, config: EnrichConfig | None = None) -> list[str]:
    """The keywords of a reply: split on commas, lines and bullets, stripped, without duplicates, copied
    sentences (more than ``max_words`` words) or placeholders; at most ``max_keys``. [] = unusable."""
    config = config or EnrichConfig()
    out: list[str] = []
    seen: set[str] = set()
    for piece in _SPLIT.split(_PREFIX.sub("", text or "")):
        word = piece.strip().strip("\"'`.:!?()[]{}*").strip()
        if not word or word.lower() in _NONE or len(word.split()) > config.max_words or len(word) > 60:
            continue
        if word.lower() not in seen:
            seen.add(word.lower())
            out.append(word)
    return out[: config.max_keys]


def _date(item: MemoryItem) -> str | None:
    iso = item.metadata.get("date")
    if isinstance(iso, str):
        try:
            d = datetime.fromisoformat(iso)
            return f"{d.day} {d:%B %Y}"
        except ValueError:
            return iso
    return None


def _text(item: MemoryItem) -> str:
    text = item.metadata.get("text")
    return text if isinstance(text, str) and text else item.content


def prompt(item: MemoryItem, previous: MemoryItem | None, config: EnrichConfig) -> list[dict[str, str]]:
    """The chat messages asking for ``item``'s keys (``previous``: the item before it in its session)."""
    lines = []
    date = _date(item)
    if date:
        lines.append(f"Date: {date}")
    if config.context:
        lines.append(f"Previous: {_text(previous) if previous is not None else '(none)'}")
    lines.append(f"Message: {_text(item)}")
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": EXAMPLE[0]},
        {"role": "assistant", "content": EXAMPLE[1]},
        {"role": "user", "content": "\n".join(lines)},
    ]


def units(items: Sequence[MemoryItem]) -> list[tuple[MemoryItem, MemoryItem | None]]:
    """(item to enrich, previous such item of the same session) in store order: one item per unit
    (``metadata["unit"]``; the one whose id is the unit when there is one), every item without a unit."""
    chosen: dict[Any, MemoryItem] = {}
    for it in items:
        unit = it.metadata.get("unit")
        key = ("u", unit) if unit is not None else ("i", it.id)
        if key not in chosen or (unit is not None and it.id == unit and chosen[key].id != unit):
            chosen[key] = it
    out: list[tuple[MemoryItem, MemoryItem | None]] = []
    last: dict[Any, MemoryItem] = {}
    for it in chosen.values():
        out.append((it, last.get(it.session)))
        last[it.session] = it
    return out


async def enrich(
    memory: AsyncMemory,
    namespace: str,
    llm: Any,
    *,
    config: EnrichConfig | None = None,
    progress: bool = False,
    bar: Any = None,
    limit: int | None = None,
) -> EnrichStats:
    """Write keys for the items of ``namespace`` that have none (see the module docstring); ``limit``:
    at most this many of them in this call (a later call goes on with the rest)."""
    from memrl.llm import SamplingParams

    config = config or EnrichConfig()
    stats = EnrichStats(namespace=namespace)
    t0 = time.perf_counter()
    items = await memory.list(namespace=namespace)
    todo = units(items)
    stats.items = len(todo)
    done = memory.store.keyed_ids(namespace)
    # an item counts as done when any item of its unit has keys (a unit is searched as one)
    done_units = {it.metadata.get("unit", it.id) for it in items if it.id in done}
    todo = [(it, prev) for it, prev in todo if it.metadata.get("unit", it.id) not in done_units]
    stats.done_before = stats.items - len(todo)
    if limit is not None:
        todo = todo[: max(0, limit)]
    own_bar = None
    if bar is not None and stats.done_before:
        bar.update(stats.done_before)
    if bar is None and progress:
        from tqdm.auto import tqdm

        bar = own_bar = tqdm(total=len(todo), desc=f"enrich {namespace}", unit="item")
    sampling = SamplingParams(temperature=0.0, max_tokens=config.max_tokens)
    try:
        for start in range(0, len(todo), config.concurrency):
            block = todo[start : start + config.concurrency]
            replies = await asyncio.gather(
                *(llm.chat(prompt(it, prev, config), sampling=sampling) for it, prev in block),
                return_exceptions=True,
            )
            stats.calls += len(block)
            keys: dict[str, str] = {}
            errors = [r for r in replies if isinstance(r, BaseException)]
            for (it, prev), reply in zip(block, replies, strict=True):
                if isinstance(reply, BaseException):
                    if not isinstance(reply, Exception):
                        raise reply
                    stats.failed += 1
                    continue
                text = (getattr(reply, "text", "") or "").strip()
                words = parse_keys(text, config)
                if words and config.new_only:
                    known = _WORD.findall(f"{_text(it)} {_text(prev) if prev is not None else ''}".lower())
                    words = [w for w in words if not set(_WORD.findall(w.lower())) <= set(known)]
                    if not words:
                        stats.nothing_new += 1
                        continue
                if words:
                    keys[it.id] = ", ".join(words)
                    stats.enriched += 1
                elif not text or text.lower() in _NONE:
                    stats.empty += 1
                else:
                    stats.malformed += 1
            if keys:
                await memory.set_keys(keys, namespace=namespace)
            if bar is not None:
                bar.update(len(block))
            if errors and len(errors) == len(block):
                raise ProviderError(
                    f"enrichment of {namespace!r}: every call of a block failed ({errors[0]}); "
                    f"keys written so far are kept, a re-run resumes"
                ) from errors[0]
    finally:
        if own_bar is not None:
            own_bar.close()
        stats.time_s = time.perf_counter() - t0
    return stats
