"""MemBuilder's configuration: which operations each memory type's agent may use, and every knob of the
agents (context shown, sampling, action budget, core-memory compression), checked on construction.

    from memrl.agents.membuilder.config import MemBuilderConfig
    cfg = MemBuilderConfig(context="full", max_operations=2)
    cfg.answer_budget          # max_tokens of each agent call: the longest answer the schema allows
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from memrl.agents.membuilder.schema import REF_CHARS, budget_schema, compress_schema, worst_case_tokens
from memrl.config import option
from memrl.errors import ConfigError
from memrl.llm.base import SamplingParams
from memrl.memory.records import ITEM_TYPES, MemoryType
from memrl.tools.membuilder import MAX_ITEM_CHARS

__all__ = ["OPERATIONS", "ORDER", "SAMPLING", "Context", "MemBuilderConfig", "prompt_options"]

Context = Literal["retrieved", "full"]
ORDER: tuple[MemoryType, ...] = (MemoryType.CORE, *ITEM_TYPES)  # the fixed order answers are applied in
OPERATIONS: dict[MemoryType, tuple[str, ...]] = {
    MemoryType.CORE: ("APPEND", "REPLACE", "REWRITE", "SKIP"),
    MemoryType.EPISODIC: ("ADD", "UPDATE", "MERGE"),
    MemoryType.SEMANTIC: ("ADD", "UPDATE", "SKIP"),
    MemoryType.PROCEDURAL: ("ADD", "UPDATE"),
}


@dataclass(frozen=True)
class MemBuilderConfig:
    """Knobs of the MemBuilder agents (``MemBuilderAgent(llm, config)``)."""

    context: Context = option(
        "retrieved",
        "memory shown to each agent: 'full' (the original: core + every item, prompts grow with the "
        "conversation) or 'retrieved' (core + the context_k items of the agent's own type most relevant "
        "to the session)",
    )
    context_k: int = option(8, "retrieved: items of the agent's own type shown")
    query_turns: int = option(4, "retrieved: turns per search query (the session is searched in windows)")
    temperature: float = option(0.0, "sampling temperature of every agent (0 = greedy)")
    top_p: float = option(1.0, "nucleus sampling mass")
    seed: int | None = option(None, "sampling seed (repeatable sampling at temperature > 0)")
    max_operations: int = option(3, "at most this many operations per answer (schema maxItems)")
    max_item_chars: int = option(
        200, f"characters per memory written or quoted (schema maxLength; at most {MAX_ITEM_CHARS})"
    )
    max_tokens: int | None = option(
        None,
        "token budget of each agent's answer, one value for all four so they batch together (default: "
        "the longest answer the schema allows, so a constrained answer always finishes; see "
        "worst_case_tokens)",
    )
    core_rewrite: bool = option(
        False, "offer REWRITE to the per-session core agent (the original does; a REWRITE wider than "
        "max_item_chars cannot fit the budget, and a short one wipes the block)",
    )  # fmt: skip
    core_skip: bool = option(
        False, "offer SKIP to the core agent (leave core memory as it is). Off by default: the untrained "
        "agents and the shipped adapter were asked without it; the annotation expert's SFT data turns it on, "
        "so a session that changes nothing in core is a SKIP, not a REPLACE of a line by itself",
    )  # fmt: skip
    core_limit: int | None = option(None, "core memory character limit (default: the store's, 5,000)")
    compress_at: float = option(0.9, "compress core memory once it exceeds this share of its limit")
    compress_to: int = option(3000, "the compression REWRITE must be under this many characters")
    compress_max_tokens: int | None = option(
        None, "token budget of the compression answer (default: the longest REWRITE allowed)"
    )
    types: tuple[str, ...] = option(
        ("core", "episodic", "semantic", "procedural"), "which agents run (memory types)"
    )

    def __post_init__(self) -> None:
        if self.context not in ("retrieved", "full"):
            raise ConfigError(f"context must be 'retrieved' or 'full', got {self.context!r}")
        if self.context_k < 1 or self.query_turns < 1:
            raise ConfigError("context_k and query_turns must be at least 1")
        if not 1 <= self.max_operations <= 10:
            raise ConfigError("max_operations must be within 1..10 (the action schema allows 10)")
        if not 20 <= self.max_item_chars <= MAX_ITEM_CHARS:
            raise ConfigError(f"max_item_chars must be within 20..{MAX_ITEM_CHARS} (MAX_ITEM_CHARS)")
        if not 0 < self.compress_at <= 1:
            raise ConfigError(f"compress_at is a share of the core limit, in (0, 1]; got {self.compress_at}")
        if not 100 <= self.compress_to <= 5000:
            raise ConfigError(f"compress_to must be within 100..5000, got {self.compress_to}")
        if self.core_limit is not None and self.compress_to >= self.compress_at * self.core_limit:
            raise ConfigError(
                "compress_to must be below compress_at * core_limit, or compression never helps"
            )
        bad = [t for t in self.types if t not in OPERATIONS]
        if bad or not self.types or len(set(self.types)) != len(self.types):
            raise ConfigError(
                f"types must be distinct memory types among {[t.value for t in ORDER]}, got {self.types}"
            )
        # A cut answer is not JSON: the budgets must hold the longest answer the schemas allow.
        for name, need in (
            ("max_tokens", self.longest_answer()),
            ("compress_max_tokens", self.longest_compression()),
        ):
            given = getattr(self, name)
            if given is not None and given < need:
                raise ConfigError(
                    f"{name}={given} is less than the {need} tokens the longest allowed answer may take (one "
                    "token per character of text): a cut answer is not JSON. Raise it, leave it unset, or "
                    "lower "
                    + ("max_operations / max_item_chars." if name == "max_tokens" else "compress_to.")
                )

    def longest_answer(self) -> int:
        """Tokens of the longest answer any agent may give under this config (see worst_case_tokens)."""
        return max(
            worst_case_tokens(budget_schema(
                t, operations=self.operations(t), max_operations=self.max_operations,
                max_chars=self.max_item_chars, ref_chars=REF_CHARS,
            ))
            for t in ORDER if t.value in self.types
        )  # fmt: skip

    def longest_compression(self) -> int:
        return worst_case_tokens(compress_schema(self.compress_to))

    @property
    def answer_budget(self) -> int:
        """``max_tokens`` of each agent call: as given, else the longest answer allowed."""
        return self.max_tokens or self.longest_answer()

    @property
    def compress_budget(self) -> int:
        return self.compress_max_tokens or self.longest_compression()

    def sampling(self, max_tokens: int | None = None) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=max_tokens or self.answer_budget,
            seed=self.seed,
        )

    def operations(self, memory_type: MemoryType) -> tuple[str, ...]:
        ops = OPERATIONS[memory_type]
        if memory_type is MemoryType.CORE:
            off = {"REWRITE"} if not self.core_rewrite else set()
            off |= {"SKIP"} if not self.core_skip else set()
            ops = tuple(o for o in ops if o not in off)
        return ops


#: Fields of :class:`MemBuilderConfig` that set how the agents sample, not what they are asked.
SAMPLING = frozenset({"temperature", "top_p", "seed"})


def prompt_options(config: MemBuilderConfig) -> list[str]:
    """``KEY=VALUE`` for each :class:`MemBuilderConfig` field (sampling aside) of ``config`` that is not the
    default: what a trained adapter records (``agent_options`` in its adapter.json), so that a builder
    loading it asks the prompts and schemas it was trained on (:func:`memrl.llm.local.packaged.trained_options`)."""
    default = MemBuilderConfig()
    out = []
    for f in fields(MemBuilderConfig):
        value = getattr(config, f.name)
        if f.name in SAMPLING or value == getattr(default, f.name):
            continue
        text = (
            ",".join(map(str, value)) if isinstance(value, tuple) else "none" if value is None else str(value)
        )
        out.append(f"{f.name}={text}")
    return out
