"""Group-relative advantages for GRPO/DAPO, as pure torch functions (used by the local trainer and verl).

Shapes: ``B`` samples, ``G`` samples per group, ``T`` tokens. Rewards come either as ``[B]`` with a
``group_ids`` of length ``B`` (any hashable ids, or an integer tensor), or as ``[num_groups, G]`` with one
group per row.

A reward of NaN means "no reward could be computed" (see :class:`memrl.rewards.RewardOutcome`): it is
left out of its group's mean and std and its advantage is 0, so a failure never pushes the policy. A
group with fewer than two scored samples has no contrast: its advantages are 0.

    adv = grpo_advantages(torch.tensor([[1., 0., 0., 1.]]), normalize_std=False)  # [[.5, -.5, -.5, .5]]
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

__all__ = [
    "attribution_scaled_advantages",
    "dynamic_sampling_mask",
    "grpo_advantages",
]

GroupIds = torch.Tensor | Sequence[Hashable]


def _as_float(x: torch.Tensor | Sequence[float]) -> torch.Tensor:
    t = torch.as_tensor(x)
    return t if t.is_floating_point() else t.to(torch.get_default_dtype())


def _flatten(rewards: torch.Tensor, group_ids: GroupIds | None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(flat rewards [N], group index [N] in 0..n_groups-1, n_groups)."""
    if group_ids is None:
        if rewards.dim() != 2:
            raise ValueError(
                f"without group_ids, rewards must be [num_groups, G]; got shape {tuple(rewards.shape)}"
            )
        n_groups, g = rewards.shape
        index = torch.arange(n_groups, device=rewards.device).repeat_interleave(g)
        return rewards.reshape(-1), index, n_groups
    if rewards.dim() != 1:
        raise ValueError(f"with group_ids, rewards must be [B]; got shape {tuple(rewards.shape)}")
    if isinstance(group_ids, torch.Tensor):
        _, index = torch.unique(group_ids.reshape(-1), return_inverse=True)
    else:
        ids: dict[Hashable, int] = {}
        index = torch.tensor([ids.setdefault(g, len(ids)) for g in group_ids], dtype=torch.long)
    if index.numel() != rewards.numel():
        raise ValueError(f"group_ids has {index.numel()} entries but rewards has {rewards.numel()}")
    index = index.to(rewards.device)
    return rewards, index, int(index.max().item()) + 1 if index.numel() else 0


def _group_sum(values: torch.Tensor, index: torch.Tensor, n_groups: int) -> torch.Tensor:
    return torch.zeros(n_groups, dtype=values.dtype, device=values.device).index_add_(0, index, values)


def grpo_advantages(
    rewards: torch.Tensor | Sequence[float],
    group_ids: GroupIds | None = None,
    *,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """A_i = r_i - mean(group), divided by (std(group) + eps) if ``normalize_std``.

    ``rewards``: ``[B]`` with ``group_ids`` (length B), or ``[num_groups, G]``. Returns the same shape.
    The std is the unbiased one (Bessel), as in verl and TRL. MemAgent trains with
    ``normalize_std=False`` (Dr. GRPO): with it, the advantages of each group sum to 0.
    """
    r = _as_float(rewards)
    flat, index, n_groups = _flatten(r, group_ids)
    valid = ~torch.isnan(flat)
    r0 = torch.where(valid, flat, torch.zeros_like(flat))
    count = _group_sum(valid.to(flat.dtype), index, n_groups)
    mean = _group_sum(r0, index, n_groups) / count.clamp(min=1)
    dev = torch.where(valid, flat - mean[index], torch.zeros_like(flat))
    adv = dev
    if normalize_std:
        var = _group_sum(dev * dev, index, n_groups) / (count - 1).clamp(min=1)
        adv = dev / (var.sqrt()[index] + eps)
    adv = torch.where(valid & (count[index] >= 2), adv, torch.zeros_like(adv))
    return adv.reshape(r.shape)


def dynamic_sampling_mask(
    rewards: torch.Tensor | Sequence[float], group_ids: GroupIds | None = None, *, atol: float = 0.0
) -> torch.Tensor:
    """DAPO dynamic sampling: False for groups whose scored rewards are all equal (no learning signal).

    ``rewards`` ``[num_groups, G]`` gives a bool mask ``[num_groups]`` (one per group); ``[B]`` with
    ``group_ids`` gives a mask ``[B]`` (one per sample, equal within a group). NaN rewards are ignored;
    a group with fewer than two scored samples is dropped. Rewards within ``atol`` count as equal.
    """
    r = _as_float(rewards)
    flat, index, n_groups = _flatten(r, group_ids)
    valid = ~torch.isnan(flat)
    inf = torch.full_like(flat, float("inf"))
    hi = torch.full((n_groups,), -float("inf"), dtype=flat.dtype, device=flat.device)
    lo = torch.full((n_groups,), float("inf"), dtype=flat.dtype, device=flat.device)
    hi = hi.scatter_reduce(0, index, torch.where(valid, flat, -inf), reduce="amax")
    lo = lo.scatter_reduce(0, index, torch.where(valid, flat, inf), reduce="amin")
    count = _group_sum(valid.to(flat.dtype), index, n_groups)
    keep = (count >= 2) & ((hi - lo) > atol)
    return keep if group_ids is None else keep[index]


def attribution_scaled_advantages(
    advantages: torch.Tensor, weights: torch.Tensor | Sequence[float]
) -> torch.Tensor:
    """ADRPO attribution: ``advantages`` ``[B]`` or ``[B, T]`` times per-sample ``weights`` ``[B]``."""
    w = torch.as_tensor(weights, dtype=advantages.dtype, device=advantages.device)
    if w.dim() != 1 or w.shape[0] != advantages.shape[0]:
        raise ValueError(f"weights must be [B] with B={advantages.shape[0]}, got shape {tuple(w.shape)}")
    return advantages * w.reshape(-1, *([1] * (advantages.dim() - 1)))
