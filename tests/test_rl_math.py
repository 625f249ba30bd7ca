"""Tests of memrl.train.advantages and memrl.train.losses: GRPO/DAPO maths on hand-made tensors."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from memrl.rewards import RewardOutcome  # noqa: E402
from memrl.train.advantages import (  # noqa: E402
    attribution_scaled_advantages,
    dynamic_sampling_mask,
    grpo_advantages,
)
from memrl.train.losses import aggregate_loss, kl_penalty, policy_loss  # noqa: E402

# ---------------------------------------------------------------------------------------------------
# advantages


def test_grpo_advantages_sum_to_zero_per_group():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.2, 0.9, 0.4, 0.5]])
    adv = grpo_advantages(rewards, normalize_std=False)
    assert adv.shape == rewards.shape
    assert torch.allclose(adv.sum(dim=1), torch.zeros(2), atol=1e-6)
    assert torch.allclose(adv[0], torch.tensor([0.5, -0.5, -0.5, 0.5]))


def test_grpo_std_normalisation_uses_unbiased_std():
    adv = grpo_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0]]), normalize_std=True, eps=0.0)
    # mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = sqrt(1/3): 0.5 / sqrt(1/3) = sqrt(3)/2
    assert torch.allclose(adv[0], torch.tensor([1.0, -1.0, -1.0, 1.0]) * math.sqrt(3) / 2)
    rewards = torch.tensor([[3.0, 7.0, 1.0, 9.0, 4.0]])
    adv = grpo_advantages(rewards, eps=0.0)
    assert adv.mean().item() == pytest.approx(0.0, abs=1e-6)
    assert adv.std().item() == pytest.approx(1.0, abs=1e-5)


def test_grpo_flat_with_group_ids_matches_rows():
    rows = torch.tensor([[1.0, 0.0, 0.5], [2.0, 2.0, 5.0]])
    by_row = grpo_advantages(rows)
    flat = torch.tensor([2.0, 1.0, 2.0, 0.0, 0.5, 5.0])
    ids = ["b", "a", "b", "a", "a", "b"]
    adv = grpo_advantages(flat, ids)
    expected = torch.stack(
        [by_row[1, 0], by_row[0, 0], by_row[1, 1], by_row[0, 1], by_row[0, 2], by_row[1, 2]]
    )
    assert torch.allclose(adv, expected)
    # integer tensor ids give the same result
    assert torch.allclose(grpo_advantages(flat, torch.tensor([7, 3, 7, 3, 3, 7])), expected)


def test_grpo_degenerate_groups_and_failures_get_zero():
    adv = grpo_advantages(torch.tensor([[1.0, 1.0, 1.0]]))  # all equal: 0, not NaN
    assert torch.equal(adv, torch.zeros(1, 3))
    assert torch.equal(grpo_advantages([4.0], ["solo"]), torch.zeros(1))  # singleton group
    # a failed reward (NaN) is left out of the statistics and gets advantage 0
    adv = grpo_advantages(torch.tensor([[1.0, 0.0, float("nan")]]), normalize_std=False)
    assert torch.allclose(adv, torch.tensor([[0.5, -0.5, 0.0]]))
    with pytest.raises(ValueError):
        grpo_advantages(torch.tensor([1.0, 2.0]))  # 1-D needs group ids


def test_reward_failures_flow_into_advantages_as_no_signal():
    outcomes = [RewardOutcome.ok(1.0), RewardOutcome.failed("judge timeout"), RewardOutcome.ok(0.0)]
    adv = grpo_advantages(RewardOutcome.values_or_nan(outcomes), [0, 0, 0], normalize_std=False)
    assert torch.allclose(adv, torch.tensor([0.5, 0.0, -0.5]))


def test_dynamic_sampling_mask_drops_groups_with_equal_rewards():
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.3, float("nan"), 0.3]])
    assert dynamic_sampling_mask(rewards).tolist() == [False, True, False, False]
    flat = torch.tensor([1.0, 0.0, 2.0, 2.0])
    assert dynamic_sampling_mask(flat, ["x", "x", "y", "y"]).tolist() == [True, True, False, False]
    assert dynamic_sampling_mask(torch.tensor([[0.5, 0.5001]]), atol=1e-3).tolist() == [False]


def test_attribution_scaled_advantages_broadcast_over_tokens():
    adv = torch.tensor([0.5, -1.0, 2.0])
    w = [1.0, 4.0, 1.0]
    assert torch.allclose(attribution_scaled_advantages(adv, w), torch.tensor([0.5, -4.0, 2.0]))
    per_token = attribution_scaled_advantages(adv[:, None].expand(3, 2), w)
    assert torch.allclose(per_token, torch.tensor([[0.5, 0.5], [-4.0, -4.0], [2.0, 2.0]]))
    with pytest.raises(ValueError):
        attribution_scaled_advantages(adv, [1.0, 2.0])


# ---------------------------------------------------------------------------------------------------
# policy loss


def _grad_wrt_logprobs(ratio: float, advantage: float, **kw):
    old = torch.zeros(1, 1)
    logp = torch.full((1, 1), math.log(ratio), requires_grad=True)
    loss, metrics = policy_loss(logp, old, torch.tensor([advantage]), torch.ones(1, 1), **kw)
    loss.backward()
    return logp.grad.item(), loss.item(), metrics


def test_gradient_sign_follows_the_advantage():
    g_pos, loss, _ = _grad_wrt_logprobs(1.0, 1.0)
    assert loss == pytest.approx(-1.0)
    assert g_pos < 0  # descending the loss raises the log-prob of a good token
    g_neg, _, _ = _grad_wrt_logprobs(1.0, -1.0)
    assert g_neg > 0


def test_clip_higher_zeroes_gradient_beyond_one_plus_eps_high():
    grad, loss, metrics = _grad_wrt_logprobs(1.5, 1.0)
    assert grad == 0.0
    assert loss == pytest.approx(-1.28)  # -A * (1 + clip_high)
    assert metrics["clip_frac"] == 1.0 and metrics["clip_frac_high"] == 1.0
    # decoupled: ratio 1.25 is inside [0.8, 1.28] so it still learns; with a symmetric 0.2 it would not
    assert _grad_wrt_logprobs(1.25, 1.0)[0] != 0.0
    assert _grad_wrt_logprobs(1.25, 1.0, clip_high=0.2)[0] == 0.0


def test_clip_low_and_the_unclipped_sides():
    grad, _, metrics = _grad_wrt_logprobs(0.5, -1.0)  # A < 0, ratio < 1 - clip_low: clipped
    assert grad == 0.0 and metrics["clip_frac_low"] == 1.0
    assert _grad_wrt_logprobs(0.5, 1.0)[0] != 0.0  # A > 0 with a low ratio: never clipped
    assert _grad_wrt_logprobs(1.5, -1.0)[0] != 0.0  # A < 0 with a high ratio: never clipped


def test_dual_clip_caps_negative_advantage_loss():
    grad, loss, metrics = _grad_wrt_logprobs(5.0, -1.0, clip_c=3.0)
    assert loss == pytest.approx(3.0) and grad == 0.0 and metrics["dual_clip_frac"] == 1.0
    _, loss, _ = _grad_wrt_logprobs(5.0, -1.0)
    assert loss == pytest.approx(5.0)
    with pytest.raises(ValueError):
        _grad_wrt_logprobs(1.0, -1.0, clip_c=1.0)


def test_token_mean_and_seq_mean_aggregation_differ_as_expected():
    # ratio 1 everywhere: the per-token loss is -A. Sequence 0 has 3 tokens with A=+1, sequence 1 one token
    # with A=-1, and sequence 2 none.
    logp = torch.zeros(3, 3)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    adv = torch.tensor([1.0, -1.0, 5.0])
    tm, _ = policy_loss(logp, logp, adv, mask, loss_agg="token-mean")
    smtm, _ = policy_loss(logp, logp, adv, mask, loss_agg="seq-mean-token-mean")
    smts, _ = policy_loss(logp, logp, adv, mask, loss_agg="seq-mean-token-sum")
    assert tm.item() == pytest.approx((-3 + 1) / 4)  # every token weighs the same: long sequence dominates
    assert smtm.item() == pytest.approx((-1 + 1) / 2)  # every sequence weighs the same
    assert smts.item() == pytest.approx((-3 + 1) / 2)
    with pytest.raises(ValueError):
        aggregate_loss(logp, mask, "sum")  # type: ignore[arg-type]


def test_masked_tokens_do_not_affect_loss_or_gradient():
    old = torch.zeros(1, 4)
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0]])
    a = torch.tensor([[0.1, -0.2, 0.0, 0.0]], requires_grad=True)
    b = torch.tensor([[0.1, -0.2, 9.0, -9.0]], requires_grad=True)
    la, ma = policy_loss(a, old, torch.tensor([1.0]), mask)
    lb, mb = policy_loss(b, old, torch.tensor([1.0]), mask)
    assert la.item() == pytest.approx(lb.item())
    assert ma["n_tokens"] == 2.0 and ma["approx_kl"] == pytest.approx(mb["approx_kl"])
    lb.backward()
    assert b.grad[0, 2:].abs().sum().item() == 0.0


def test_policy_loss_metrics_at_ratio_one():
    logp = torch.randn(2, 5)
    _, metrics = policy_loss(logp, logp.clone(), torch.tensor([1.0, -1.0]), torch.ones(2, 5))
    assert metrics["clip_frac"] == 0.0
    assert metrics["approx_kl"] == pytest.approx(0.0, abs=1e-7)
    assert metrics["ratio_mean"] == pytest.approx(1.0)


# ---------------------------------------------------------------------------------------------------
# KL


def test_kl_estimators_hand_values():
    logp = torch.tensor([[-1.0]])
    ref = torch.tensor([[-2.0]])  # log r = ref - logp = -1
    mask = torch.ones(1, 1)
    assert kl_penalty(logp, ref, mask, "k1")[0].item() == pytest.approx(1.0)
    assert kl_penalty(logp, ref, mask, "k2")[0].item() == pytest.approx(0.5)
    assert kl_penalty(logp, ref, mask, "k3")[0].item() == pytest.approx(math.exp(-1))
    assert kl_penalty(logp, ref, mask, "low_var_kl")[0].item() == pytest.approx(math.exp(-1))
    with pytest.raises(ValueError):
        kl_penalty(logp, ref, mask, "k9")  # type: ignore[arg-type]


def test_kl_is_zero_at_reference_and_k3_nonnegative_and_clamped():
    logp = torch.randn(3, 4)
    mask = torch.ones(3, 4)
    for kind in ("k1", "k2", "k3", "low_var_kl"):
        assert kl_penalty(logp, logp.clone(), mask, kind)[0].item() == pytest.approx(0.0, abs=1e-7)
    ref = logp + torch.randn(3, 4)
    loss, metrics = kl_penalty(logp, ref, mask, "k3")
    assert loss.item() >= 0.0 and metrics["kl_max"] >= metrics["kl"]
    far, _ = kl_penalty(torch.zeros(1, 1), torch.full((1, 1), 50.0), torch.ones(1, 1), "low_var_kl")
    assert far.item() == pytest.approx(10.0)


def test_kl_gradient_pulls_towards_reference():
    ref = torch.zeros(1, 1)
    logp = torch.full((1, 1), 0.5, requires_grad=True)
    loss, _ = kl_penalty(logp, ref, torch.ones(1, 1), "k3")
    loss.backward()
    assert logp.grad.item() > 0  # descending lowers logp back towards the reference
