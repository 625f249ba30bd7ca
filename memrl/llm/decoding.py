"""The token loop of the local back-end: batched, left-padded, KV-cached, optionally grammar-constrained.

Why our own loop rather than ``model.generate``: we need, per sequence, (a) an xgrammar matcher that is
advanced only while that sequence is alive (``xgrammar.contrib.hf.LogitsProcessor`` asserts on the pad
tokens HF feeds finished rows), (b) the log-probability of every sampled token under the *unmodified*
model distribution (temperature 1, no grammar mask: what an RL trainer recomputes, and vLLM's default
``raw_logprobs``), and (c) finished rows dropped from the batch so the survivors run faster.

Rows are left-padded; position ids come from the attention mask, so a prompt gets the same positions alone
or in a batch. A row stops at a stop token (kept as its last completion id, as vLLM does), when its grammar
terminates, at a stop string (the text is cut before it), or after ``max_tokens`` (``"length"``)::

    gens = generate(model, tokenizer, [prompt_ids], sampling=SamplingParams(max_tokens=64),
                    matchers=[None], stop_ids={eos_id})
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memrl.errors import ProviderError
from memrl.llm.base import SamplingParams


@dataclass
class Generation:
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str  # "stop" | "length"


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
) -> list[Generation]:
    """Complete every prompt (token ids, no padding). ``matchers[i]``: xgrammar matcher or None."""
    import torch
    import xgrammar as xgr
    from transformers import DynamicCache

    n = len(prompts)
    matchers = matchers or [None] * n
    device = next(model.parameters()).device
    pad = pad_id if pad_id is not None else min(stop_ids)
    width = max(len(p) for p in prompts)
    ids = torch.full((n, width), pad, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=model.config)
    generator = None
    if sampling.seed is not None and sampling.temperature > 0:
        generator = torch.Generator(device=device).manual_seed(sampling.seed)
    n_real = len(tokenizer)  # the embedding may be padded beyond the tokenizer: never emit those ids
    bitmask = xgr.allocate_token_bitmask(n, _vocab_size(model)) if any(matchers) else None

    rows = list(range(n))  # batch row j holds sequence rows[j]
    out: list[list[int]] = [[] for _ in range(n)]
    lps: list[list[float]] = [[] for _ in range(n)]
    texts: list[str | None] = [None] * n
    finish: list[str | None] = [None] * n
    with torch.inference_mode():
        step_in, step_mask, step_pos = ids, mask, positions
        while True:
            logits = (
                model(
                    input_ids=step_in,
                    attention_mask=step_mask,
                    position_ids=step_pos,
                    past_key_values=cache,
                    use_cache=True,
                    logits_to_keep=1,
                )
                .logits[:, -1, :]
                .float()
            )
            logprobs = torch.log_softmax(logits, dim=-1)
            scores = logits
            if n_real < scores.shape[-1]:
                scores[:, n_real:] = float("-inf")
            constrained = [j for j, r in enumerate(rows) if matchers[r] is not None]
            if constrained:
                for j in constrained:
                    matchers[rows[j]].fill_next_token_bitmask(bitmask, j)
                xgr.apply_token_bitmask_inplace(scores, bitmask.to(scores.device), indices=constrained)
            tokens = _choose(scores, sampling, generator).tolist()
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
            step_in = next_tokens
            step_mask = torch.cat([step_mask, step_mask.new_ones((len(rows), 1))], dim=1)
            step_pos = step_pos[:, -1:] + 1
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


def _vocab_size(model: Any) -> int:
    """Bitmask width: the model's (possibly padded) vocabulary."""
    return int(model.config.get_text_config().vocab_size)
