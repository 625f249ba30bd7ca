"""Policy-gradient losses for GRPO/DAPO as pure torch functions (used by the local trainer and verl).

Shapes: ``B`` sequences, ``T`` tokens; ``mask`` ``[B, T]`` is 1 for tokens the policy generated (0 for
prompt, tool output and padding). Each function returns ``(loss, metrics)``: a scalar tensor to
backpropagate and a dict of floats to log.

Loss aggregation (``loss_agg``):

* ``"token-mean"``: mean over all generated tokens of the batch (DAPO): long answers weigh more;
* ``"seq-mean-token-mean"``: mean over sequences of each sequence's token mean (original GRPO);
* ``"seq-mean-token-sum"``: mean over sequences of each sequence's token sum (Dr. GRPO style; scale it
  by a constant such as the max length yourself).

Sequences without any generated token are left out of the sequence means.
"""

from __future__ import annotations

from typing import Literal

import torch

__all__ = ["LossAgg", "aggregate_loss", "kl_penalty", "policy_loss"]

LossAgg = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]
KLKind = Literal["k1", "k2", "k3", "low_var_kl"]


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def aggregate_loss(
    loss_mat: torch.Tensor, mask: torch.Tensor, loss_agg: LossAgg = "token-mean"
) -> torch.Tensor:
    """Reduce per-token losses ``[B, T]`` under ``mask`` ``[B, T]`` to a scalar (see the module docstring)."""
    if loss_mat.shape != mask.shape:
        raise ValueError(
            f"loss {tuple(loss_mat.shape)} and mask {tuple(mask.shape)} must have the same shape"
        )
    m = mask.to(loss_mat.dtype)
    if loss_agg == "token-mean":
        return _masked_mean(loss_mat, m)
    tokens = m.sum(dim=-1)
    has_tokens = tokens > 0
    seq_sum = (loss_mat * m).sum(dim=-1)
    if loss_agg == "seq-mean-token-mean":
        per_seq = seq_sum / tokens.clamp(min=1)
    elif loss_agg == "seq-mean-token-sum":
        per_seq = seq_sum
    else:
        raise ValueError(
            f"unknown loss_agg {loss_agg!r}; use token-mean, seq-mean-token-mean or seq-mean-token-sum"
        )
    n_seq = has_tokens.sum().clamp(min=1)
    return (per_seq * has_tokens).sum() / n_seq


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    loss_agg: LossAgg = "token-mean",
    clip_c: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip surrogate with decoupled clip range [1 - clip_low, 1 + clip_high] (DAPO's clip-higher).

    ``logprobs``/``old_logprobs``/``mask``: ``[B, T]``; ``advantages``: ``[B]`` (one per sequence,
    broadcast over tokens) or ``[B, T]``. Per token: ``max(-A * ratio, -A * clip(ratio))``, so a token
    with A > 0 and ratio > 1 + clip_high (or A < 0 and ratio < 1 - clip_low) has zero gradient.
    ``clip_c`` (> 1) enables dual clip: for A < 0 the loss is also capped at ``-A * clip_c``.

    Metrics: ``clip_frac`` (tokens whose gradient is clipped away), ``clip_frac_high``/``clip_frac_low``,
    ``approx_kl`` (k3 estimate of KL(old || new)), ``ratio_mean``, ``ratio_max`` / ``ratio_min`` (over
    the masked tokens; 1.0 when there are none), ``n_tokens``, and ``dual_clip_frac``.
    """
    if clip_c is not None and clip_c <= 1.0:
        raise ValueError(f"clip_c must be > 1 (or None), got {clip_c}")
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    m = mask.to(logprobs.dtype)
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    pg_unclipped = -adv * ratio
    pg_clipped = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    pg = torch.maximum(pg_unclipped, pg_clipped)
    dual = torch.zeros_like(pg, dtype=torch.bool)
    if clip_c is not None:
        cap = -adv * clip_c
        dual = (adv < 0) & (pg > cap)
        pg = torch.where(adv < 0, torch.minimum(pg, cap), pg)
    loss = aggregate_loss(pg, m, loss_agg)

    with torch.no_grad():
        clipped = (pg_clipped > pg_unclipped).to(m.dtype)
        high = ((adv > 0) & (ratio > 1.0 + clip_high)).to(m.dtype)
        low = ((adv < 0) & (ratio < 1.0 - clip_low)).to(m.dtype)
        metrics = {
            "pg_loss": float(loss.detach()),
            "clip_frac": float(_masked_mean(clipped, m)),
            "clip_frac_high": float(_masked_mean(high, m)),
            "clip_frac_low": float(_masked_mean(low, m)),
            "dual_clip_frac": float(_masked_mean(dual.to(m.dtype), m)),
            "approx_kl": float(_masked_mean(ratio - 1.0 - log_ratio, m)),
            "ratio_mean": float(_masked_mean(ratio, m)),
            "ratio_max": float(ratio[m.bool()].max()) if m.any() else 1.0,
            "ratio_min": float(ratio[m.bool()].min()) if m.any() else 1.0,
            "n_tokens": float(m.sum()),
        }
    return loss, metrics


def kl_penalty(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    kind: KLKind = "low_var_kl",
    loss_agg: LossAgg = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """KL(policy || reference) estimated per token from sampled tokens, aggregated like the policy loss.

    With log r = ref - logp (``[B, T]``): ``k1`` = -log r = logp - ref (unbiased, can be negative),
    ``k2`` = (log r)^2 / 2, ``k3`` = r - 1 - log r (unbiased, >= 0, Schulman's estimator), and
    ``low_var_kl`` = k3 with log r clamped to [-20, 20] and the result to [-10, 10], as verl does.
    Add ``beta * loss`` to the policy loss (MemAgent: beta = 0.001).
    """
    log_r = ref_logprobs - logprobs
    if kind == "k1":
        kl = -log_r
    elif kind == "k2":
        kl = 0.5 * log_r.pow(2)
    elif kind == "k3":
        kl = torch.exp(log_r) - 1.0 - log_r
    elif kind == "low_var_kl":
        clamped = log_r.clamp(min=-20.0, max=20.0)
        kl = (torch.exp(clamped) - 1.0 - clamped).clamp(min=-10.0, max=10.0)
    else:
        raise ValueError(f"unknown KL kind {kind!r}; use k1, k2, k3 or low_var_kl")
    m = mask.to(logprobs.dtype)
    loss = aggregate_loss(kl, m, loss_agg)
    used = kl.detach()[m.bool()]
    return loss, {"kl": float(loss.detach()), "kl_max": float(used.max()) if used.numel() else 0.0}
