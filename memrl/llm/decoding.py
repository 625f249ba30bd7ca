"""The token loop of the local back-end: batched, left-padded, KV-cached, optionally grammar-constrained.

Why our own loop rather than ``model.generate``: we need, per sequence, (a) an xgrammar matcher that is
advanced only while that sequence is alive (``xgrammar.contrib.hf.LogitsProcessor`` asserts on the pad
tokens HF feeds finished rows), (b) the log-probability of every sampled token under the distribution it
was *actually drawn from* (the behaviour policy of RL), (c) finished rows dropped from the batch so the
survivors run faster, and (d) a prefix shared by several prompts (the G rollouts of a GRPO group:
identical prompts, or MemAgent's chunk prompts that differ only in the memory) prefilled once
(:func:`prefix_groups`).

**The behaviour distribution** of a position is :func:`sampling_logprobs`: the model's logits with the
ids beyond the tokenizer and, under a grammar, the tokens the grammar forbids set to -inf, divided by the
temperature (1 when greedy), log-softmaxed: masked, renormalised, temperature-scaled. Top-p truncation
(``top_p < 1``) is applied when drawing but not in the reported log-probabilities; RL rollouts keep
``top_p = 1``. A trainer recomputes the same quantity with :func:`sampling_logprobs` and
:func:`replay_masks` (the grammar replayed over the completion), so the PPO ratio is exactly 1 before any
update (tested in ``tests/test_masked_sampling.py``).

Rows are left-padded; position ids come from the attention mask, so a prompt gets the same positions alone
or in a batch. A row stops at a stop token (kept as its last completion id, as vLLM does), when its grammar
terminates, at a stop string (the text is cut before it), or after ``max_tokens`` (``"length"``)::

    gens = generate(model, tokenizer, [prompt_ids], sampling=SamplingParams(max_tokens=64),
                    matchers=[None], stop_ids={eos_id})
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memrl.errors import ProviderError
from memrl.llm.base import SamplingParams


@dataclass
class Generation:
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]  # of each sampled token under the behaviour distribution (module docstring)
    text: str
    finish_reason: str  # "stop" | "length"


def bitmask_to_bool(bitmask: Any, vocab_size: int) -> Any:
    """xgrammar's packed int32 bitmask ``[N, ceil(V/32)]`` as a bool tensor ``[N, V]`` (True = allowed)."""
    import torch

    shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    bits = (bitmask.unsqueeze(-1) >> shifts) & 1
    return bits.reshape(bitmask.shape[0], -1)[:, :vocab_size].bool()


def sampling_logprobs(logits: Any, temperature: float, allowed: Any = None, n_real: int | None = None) -> Any:
    """Log-probabilities of the behaviour distribution ``[..., V]`` (see the module docstring).

    ``allowed``: bool ``[..., V]`` from a grammar (None: no grammar); ``n_real``: ids at or beyond it
    (embedding padding) are never allowed. Differentiable in ``logits``.
    """
    import torch

    scores = logits.float()
    if n_real is not None and n_real < scores.shape[-1]:
        keep = torch.arange(scores.shape[-1], device=scores.device) < n_real
        scores = scores.masked_fill(~keep, float("-inf"))
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.log_softmax(scores / (temperature if temperature > 0 else 1.0), dim=-1)


def replay_masks(matcher: Any, completion_ids: list[int], vocab_size: int) -> Any:
    """Each completion position's allowed tokens ``[len, V]`` (bool), rebuilt by advancing a fresh
    matcher of the recorded grammar over the completion exactly as the sampler did."""
    import torch
    import xgrammar as xgr

    bitmask = xgr.allocate_token_bitmask(max(len(completion_ids), 1), vocab_size)
    for k, token in enumerate(completion_ids):
        matcher.fill_next_token_bitmask(bitmask, k)
        if not matcher.accept_token(token):
            raise ProviderError(f"replay: the recorded grammar rejects token {token} at position {k}")
    return bitmask_to_bool(bitmask[: len(completion_ids)], vocab_size).to(torch.bool)


#: A prompt joins a group's shared prefix only when they share at least this many tokens.
MIN_SHARED = 32


def _lcp(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    n = min(len(a), len(b), limit)
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def prefix_groups(
    prompts: Sequence[Sequence[int]], min_shared: int = MIN_SHARED
) -> list[tuple[int, list[int]]]:
    """Prompts grouped by a shared prefix: ``[(prefix_length, member indices)]``.

    The prefix leaves every member at least one token of its own (the last one, for identical prompts),
    so each member's next-token logits come from its own tokens. A prompt joins the group before it (prompts
    in sorted order, so shared prefixes are neighbours) when they share at least ``min_shared`` tokens and
    at least half of the group's prefix: the G rollouts of a GRPO group (identical prompts, or prompts that
    differ only after a long common part, as MemAgent's chunk prompts with the memory last) share one
    prefix; prompts of different tasks, which share only a template's opening words, do not. A prompt
    alone has prefix ``len - 1``.
    """
    order = sorted(range(len(prompts)), key=lambda i: tuple(prompts[i]))
    groups: list[tuple[int, list[int]]] = []
    for i in order:
        p = prompts[i]
        if groups:
            shared, members = groups[-1]
            k = min(_lcp(prompts[members[0]], p, shared), len(p) - 1)
            if k >= max(min_shared, shared / 2):
                groups[-1] = (k, [*members, i])
                continue
        groups.append((max(0, len(p) - 1), [i]))
    return groups


def _choose(scores: Any, sampling: SamplingParams, generator: Any) -> Any:
    """Next token per row from (already masked) logits ``[B, V]``."""
    import torch

    if sampling.temperature == 0:
        return scores.argmax(-1)
    probs = torch.softmax(scores / sampling.temperature, dim=-1)
    if sampling.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        drop = sorted_p.cumsum(-1) - sorted_p > sampling.top_p  # keeps at least the top token
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def generate(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    *,
    sampling: SamplingParams,
    matchers: list[Any] | None = None,
    stop_ids: set[int],
    pad_id: int | None = None,
    prefill_bf16: bool = False,
) -> list[Generation]:
    """Complete every prompt (token ids, no padding). ``matchers[i]``: xgrammar matcher or None.

    ``prefill_bf16``: run the prompts under ``torch.autocast(bfloat16)`` (the read benchmark's evaluation
    1.17x faster on an AVX-512 BF16 CPU, where the long prompts dominate: docs/results/learning.md), then decode in the
    model's own precision on a KV cache cast back to it. The sampled tokens' log-probabilities then differ
    from a trainer's full-precision recomputation by more than rounding: for evaluation, never for RL
    rollouts."""
    import torch
    import xgrammar as xgr
    from transformers import DynamicCache

    n = len(prompts)
    matchers = matchers or [None] * n
    device = next(model.parameters()).device
    pad = pad_id if pad_id is not None else min(stop_ids)
    cache = DynamicCache(config=model.config)
    generator = None
    if sampling.seed is not None and sampling.temperature > 0:
        generator = torch.Generator(device=device).manual_seed(sampling.seed)
    n_real = len(tokenizer)  # the embedding may be padded beyond the tokenizer: never emit those ids
    bitmask = xgr.allocate_token_bitmask(n, _vocab_size(model)) if any(matchers) else None
    if prefill_bf16:
        from memrl.llm.cpu import warn_slow_bf16

        warn_slow_bf16(device.type, "the prompts' prefill (prefill_bf16)")

    rows = list(range(n))  # batch row j holds sequence rows[j]
    out: list[list[int]] = [[] for _ in range(n)]
    lps: list[list[float]] = [[] for _ in range(n)]
    texts: list[str | None] = [None] * n
    finish: list[str | None] = [None] * n
    with torch.inference_mode():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=prefill_bf16):
            logits, step_mask, step_pos = _prefill(model, prompts, cache, pad, device)
        if prefill_bf16:
            dtype = next(model.parameters()).dtype
            for layer in cache.layers:
                layer.keys, layer.values = layer.keys.to(dtype), layer.values.to(dtype)
            logits = logits.float()
        while True:
            scores = logits
            if n_real < scores.shape[-1]:
                scores[:, n_real:] = float("-inf")
            constrained = [j for j, r in enumerate(rows) if matchers[r] is not None]
            if constrained:
                for j in constrained:
                    matchers[rows[j]].fill_next_token_bitmask(bitmask, j)
                xgr.apply_token_bitmask_inplace(scores, bitmask.to(scores.device), indices=constrained)
            tokens = _choose(scores, sampling, generator).tolist()
            logprobs = sampling_logprobs(scores, sampling.temperature)  # scores are masked already
            chosen = logprobs.gather(-1, torch.tensor(tokens, device=device)[:, None]).squeeze(-1).tolist()
            for j, r in enumerate(rows):
                token = tokens[j]
                out[r].append(token)
                lps[r].append(chosen[j])
                m = matchers[r]
                if m is not None and not m.accept_token(token):
                    raise ProviderError(f"grammar rejected token {token} ({tokenizer.decode([token])!r})")
                if token in stop_ids or (m is not None and m.is_terminated()):
                    finish[r] = "stop"
                elif sampling.stop:
                    text = tokenizer.decode(out[r], skip_special_tokens=True)
                    cut = min((k for k in (text.find(s) for s in sampling.stop) if k >= 0), default=-1)
                    if cut >= 0:
                        finish[r], texts[r] = "stop", text[:cut]
                if finish[r] is None and len(out[r]) >= sampling.max_tokens:
                    finish[r] = "length"
            keep = [j for j, r in enumerate(rows) if finish[r] is None]
            if not keep:
                break
            next_tokens = torch.tensor([tokens[j] for j in keep], device=device)[:, None]
            if len(keep) < len(rows):  # drop finished rows from the batch and the KV cache
                index = torch.tensor(keep, device=device)
                cache.batch_select_indices(index)
                step_mask, step_pos = step_mask[index], step_pos[index]
                rows = [rows[j] for j in keep]
            step_mask = torch.cat([step_mask, step_mask.new_ones((len(rows), 1))], dim=1)
            step_pos = step_pos[:, -1:] + 1
            logits = _next_logits(model, next_tokens, step_mask, step_pos, cache)
    return [
        Generation(
            prompt_ids=list(prompts[i]),
            completion_ids=out[i],
            logprobs=lps[i],
            text=texts[i] if texts[i] is not None else tokenizer.decode(out[i], skip_special_tokens=True),
            finish_reason=finish[i] or "length",
        )
        for i in range(n)
    ]


def _next_logits(model: Any, ids: Any, mask: Any, positions: Any, cache: Any) -> Any:
    """Logits ``[B, V]`` of the next token after feeding ``ids`` ``[B, T]`` on top of ``cache``."""
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                use_cache=True, logits_to_keep=1)  # fmt: skip
    return out.logits[:, -1, :].float()


def _left_padded(seqs: Sequence[Sequence[int]], pad: int) -> tuple[Any, Any]:
    import torch

    width = max(len(p) for p in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, p in enumerate(seqs):
        if p:
            ids[i, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
            mask[i, width - len(p) :] = 1
    return ids, mask


def _prefill(model: Any, prompts: list[list[int]], cache: Any, pad: int, device: Any) -> tuple[Any, Any, Any]:
    """Run every prompt into ``cache``; returns the next-token logits ``[n, V]``, the attention mask and
    the last positions of the rows.

    Prompts that share a prefix (:func:`prefix_groups`: the G rollouts of a GRPO group) have it prefilled
    once: the distinct prefixes run as one left-padded batch, their cache rows are copied to the members,
    then every member's own tokens run, left-padded after the prefix. Positions come from the attention
    mask, so each prompt gets the positions it has alone."""
    import torch

    groups = prefix_groups(prompts)
    if any(shared == 0 for shared, _ in groups):  # a one-token prompt: no prefix phase
        groups = [(0, list(range(len(prompts))))]
    source = [0] * len(prompts)
    shared_of = [0] * len(prompts)
    for g, (shared, members) in enumerate(groups):
        for i in members:
            source[i], shared_of[i] = g, shared
    mask = torch.zeros((len(prompts), 0), dtype=torch.long, device=device)
    if groups[0][0] > 0:
        heads = [prompts[members[0]][:shared] for shared, members in groups]
        ids, head_mask = _left_padded(heads, pad)
        ids, head_mask = ids.to(device), head_mask.to(device)
        model(input_ids=ids, attention_mask=head_mask, position_ids=(head_mask.cumsum(-1) - 1).clamp(min=0),
              past_key_values=cache, use_cache=True, logits_to_keep=1)  # fmt: skip
        if len(groups) < len(prompts) or source != list(range(len(prompts))):
            index = torch.tensor(source, device=device)
            cache.batch_select_indices(index)
            head_mask = head_mask[index]
        mask = head_mask
    ids, own = _left_padded([p[shared_of[i] :] for i, p in enumerate(prompts)], pad)
    mask = torch.cat([mask, own.to(device)], dim=1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -ids.shape[1] :]
    return _next_logits(model, ids.to(device), mask, positions, cache), mask, positions[:, -1:]


def _vocab_size(model: Any) -> int:
    """Bitmask width: the model's (possibly padded) vocabulary."""
    return int(model.config.get_text_config().vocab_size)
