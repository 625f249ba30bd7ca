"""The token-level protocol: what a model engine must do so memrl's chat layer can run on top of it.

memrl's agents talk to :class:`memrl.llm.base.LLM` (``chat(messages, tools=, json_schema=, sampling=)``).
Back-ends that own their tokens (the local transformers model; a verl rollout server inside an agent
loop) share one chat layer, :class:`memrl.llm.templated.TemplatedLLM`: it renders the chat template,
prompts the tools, records the constraint and parses tool calls, and hands a :class:`TokenEngine` only
token ids::

    TokenRequest(prompt_ids, sampling, constraint)  ->  TokenResult(completion_ids, logprobs, finish_reason,
                                                                     temperature, constraint)

Engines: :class:`memrl.llm.local.LocalEngine` (transformers + xgrammar, batched) and
:class:`memrl.integrations.verl.engine.ServerManagerEngine` (verl's ``server_manager.generate``).
``constraint`` is the JSON-safe record of :func:`memrl.llm.base.constraint_of` (a JSON schema, tools +
tool_choice, an EBNF grammar, or None); a result says which constraint the engine actually enforced and
which temperature it actually sampled at (a verl engine samples at verl's rollout temperature, and may
be configured not to forward constraints), so a trainer can rebuild the distribution the tokens came from.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from memrl.llm.base import SamplingParams

#: End-of-turn tokens of common chat templates (ChatML, Llama 3, Gemma, Phi): a reply ends at any of them.
STOP_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")


@dataclass(frozen=True)
class TokenRequest:
    """One completion to make: the prompt's token ids, how to sample, and what constrains the reply."""

    prompt_ids: tuple[int, ...]
    sampling: SamplingParams
    constraint: dict[str, Any] | None = None


@dataclass
class TokenResult:
    """What an engine generated. ``logprobs`` are those of the sampled tokens as the engine reports them
    (None if it does not); ``finish_reason`` is ``"stop"`` (end token, grammar complete or stop string)
    or ``"length"`` (``max_tokens`` reached); ``temperature`` and ``constraint`` say what was really used."""

    completion_ids: list[int]
    logprobs: list[float] | None
    finish_reason: str
    temperature: float
    constraint: dict[str, Any] | None = None


class TokenEngine(ABC):
    """Generates token ids from token ids. Subclasses set ``tokenizer`` (a Hugging Face tokenizer) and
    ``stop_ids`` (token ids that end a reply) once loaded, and report ``context_length`` if known."""

    tokenizer: Any = None
    stop_ids: frozenset[int] = frozenset()
    context_length: int | None = None

    def load(self) -> TokenEngine:
        """Make ``tokenizer`` and ``stop_ids`` available (engines that load lazily override this)."""
        return self

    @abstractmethod
    async def generate(self, request: TokenRequest) -> TokenResult:
        """One completion. Failures raise :class:`memrl.errors.MemrlError` subclasses."""

    async def aclose(self) -> None:
        return None


def stop_token_ids(tokenizer: Any, generation_config: Any = None) -> frozenset[int]:
    """The ids that end a reply: the tokenizer's EOS, the model's ``generation_config.eos_token_id``(s),
    and the end-of-turn tokens of :data:`STOP_TOKENS` the vocabulary has."""
    stops = {t for t in (tokenizer.eos_token_id,) if t is not None}
    eos = getattr(generation_config, "eos_token_id", None)
    stops |= set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    vocab = tokenizer.get_vocab()
    stops |= {vocab[t] for t in STOP_TOKENS if t in vocab}
    return frozenset(stops)


def finish_reason(completion_ids: list[int], stop_ids: frozenset[int], max_tokens: int) -> str:
    """``"stop"`` unless the reply used its whole budget without ending in a stop token."""
    if completion_ids and completion_ids[-1] in stop_ids:
        return "stop"
    return "length" if len(completion_ids) >= max_tokens else "stop"
