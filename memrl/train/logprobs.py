"""Log-probabilities of completions under a policy, computed the way the local back-end sampled them.

A rollout drawn under a grammar mask and/or a temperature was drawn from the *behaviour* distribution
(masked, renormalised, temperature-scaled logits; :func:`memrl.llm.decoding.sampling_logprobs`), not from
the raw softmax. Every log-probability the trainer uses (new, old, reference) is therefore computed by
:class:`PolicyLogProbs` under the sample's own recorded constraint and temperature:

* the grammar (``Sample.constraint``, the record :func:`memrl.llm.base.constraint_of` made) is compiled
  again and replayed over the completion with xgrammar (:func:`memrl.llm.decoding.replay_masks`), which
  rebuilds each position's allowed-token mask exactly; the masks are cached per sample (packed bits);
* the logits are divided by the sample's temperature (1 for greedy), as when drawing.

So the policy being optimised is the constrained policy the agent actually acts with, the PPO ratio is
exactly 1 before any update (tested), and the KL term compares the constrained distributions of the
policy and of the reference model (see :mod:`memrl.train.trainer`).

**Shared prompts.** The G completions of a GRPO group share one prompt, or a long prefix of it (MemAgent's
chunk prompts with the memory last differ only in the memory): the shared prefix
(:func:`memrl.llm.decoding.prefix_groups`) is run through the model once (its KV cache, with gradients,
copied to the G rows) and only each sample's own prompt tokens and completion are run per sample, which
cuts an update's cost by up to G x (prompt / completion) on short-answer tasks.

    scorer = PolicyLogProbs(llm)                    # llm: a loaded LocalLLM
    lp, mask = scorer(model, samples)               # [B, L] completion log-probs and mask
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from memrl.llm.decoding import bitmask_to_bool, prefix_groups, replay_masks, sampling_logprobs

__all__ = ["PolicyLogProbs", "Sample"]


@dataclass
class Sample:
    """One sequence to train on: the prompt, what the policy generated, the advantage it earned, and
    what it was sampled under (constraint record, temperature)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    advantage: float
    rollout_logprobs: list[float] | None = None
    group: int = 0
    constraint: dict[str, Any] | None = None
    temperature: float = 1.0


class PolicyLogProbs:
    """Computes completion log-probabilities of samples under a model (see the module docstring)."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        tok = llm.tokenizer
        self.pad_id = tok.pad_token_id
        if self.pad_id is None:
            self.pad_id = min(llm.stop_ids) if llm.stop_ids else 0
        self.n_real = len(tok)
        self._masks: dict[tuple[str, tuple[int, ...]], torch.Tensor] = {}

    def packed_mask(self, s: Sample) -> torch.Tensor | None:
        """The sample's per-position grammar masks as xgrammar bitmasks ``[L, ceil(V/32)]`` (None: free)."""
        if s.constraint is None:
            return None
        key = (json.dumps(s.constraint, sort_keys=True), tuple(s.completion_ids))
        if key not in self._masks:
            book = self.llm.grammars
            matcher = book.matcher(book.for_constraint(s.constraint))
            allowed = replay_masks(matcher, list(s.completion_ids), book.vocab_size)
            self._masks[key] = _pack(allowed)
        return self._masks[key]

    def clear(self) -> None:
        self._masks.clear()

    def __call__(self, model: Any, samples: Sequence[Sample]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logprobs, mask)``, both ``[B, L]`` (L = longest completion): log-probability of each
        completion token under ``model``'s behaviour distribution; mask 1 on real completion tokens."""
        device = next(model.parameters()).device
        width = max(len(s.completion_ids) for s in samples)
        rows: list[torch.Tensor | None] = [None] * len(samples)
        for shared, idx in prefix_groups([s.prompt_ids for s in samples]):
            members = [samples[i] for i in idx]
            logits = self._logits(model, list(members[0].prompt_ids[:shared]), members, device)
            for j, i in enumerate(idx):
                s = samples[i]
                n = len(s.completion_ids)
                packed = self.packed_mask(s)
                allowed = None if packed is None else bitmask_to_bool(packed.to(device), logits[j].shape[-1])
                lp = sampling_logprobs(logits[j][:n], s.temperature, allowed, self.n_real)
                target = torch.tensor(s.completion_ids, device=device)
                rows[i] = lp.gather(-1, target[:, None]).squeeze(-1)
        out = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)  # type: ignore[arg-type]
        mask = torch.zeros((len(samples), width), device=device)
        for i, s in enumerate(samples):
            mask[i, : len(s.completion_ids)] = 1
        return out, mask

    def _logits(
        self, model: Any, prefix: list[int], members: Sequence[Sample], device: Any
    ) -> list[torch.Tensor]:
        """Per member, the logits ``[len(completion), V]`` predicting its completion tokens: the shared
        ``prefix`` runs once (its KV cache, with gradients, repeated for every member), then each member's
        own prompt tokens and completion, right-padded, in one batch."""
        n = len(members)
        tails = [list(s.prompt_ids[len(prefix) :]) + list(s.completion_ids) for s in members]
        starts = [len(s.prompt_ids) - len(prefix) - 1 for s in members]  # the logit predicting completion 0
        width = max(len(t) for t in tails)
        cache = None
        if prefix:
            cache = model(
                input_ids=torch.tensor([prefix], device=device), use_cache=True, logits_to_keep=1
            ).past_key_values
            if n > 1:
                cache.batch_repeat_interleave(n)
        ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((n, len(prefix) + width), dtype=torch.long)
        attn[:, : len(prefix)] = 1
        for j, t in enumerate(tails):
            ids[j, : len(t)] = torch.tensor(t, dtype=torch.long)
            attn[j, len(prefix) : len(prefix) + len(t)] = 1
        positions = torch.arange(len(prefix), len(prefix) + width).expand(n, width)
        # logits only where a completion token is predicted (the vocabulary is large): the span from the
        # earliest completion start; the last tail token predicts nothing we train on, so it is not fed
        lo = min(starts)
        keep = torch.arange(lo, width - 1, device=device)
        logits = model(
            input_ids=ids[:, :-1].to(device),
            attention_mask=attn[:, :-1].to(device),
            position_ids=positions[:, :-1].to(device),
            past_key_values=cache,
            use_cache=cache is not None,
            logits_to_keep=keep,
        ).logits.float()
        return [
            logits[j, starts[j] - lo : starts[j] - lo + len(s.completion_ids)] for j, s in enumerate(members)
        ]


def _pack(allowed: torch.Tensor) -> torch.Tensor:
    """Bool ``[L, V]`` to int32 bitmask ``[L, ceil(V/32)]`` (the inverse of ``bitmask_to_bool``)."""
    length, vocab = allowed.shape
    words = -(-vocab // 32)
    padded = torch.zeros((length, words * 32), dtype=torch.int64)
    padded[:, :vocab] = allowed.to(torch.int64)
    shifts = torch.arange(32, dtype=torch.int64)
    packed = (padded.view(length, words, 32) << shifts).sum(-1)
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)
