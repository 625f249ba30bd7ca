"""A local GRPO / DAPO / ADRPO policy update for one machine, on the trajectories memrl's agents record.

:class:`PolicyTrainer` takes *groups* of trajectories (the G rollouts of one task, e.g. one question read
by MemAgent G times, or one MemBuilder agent's G rollouts of one session) and updates the policy that
produced them, a :class:`~memrl.llm.local.LocalLLM`'s transformers model, in place, so the next rollouts
are on-policy. One update:

1. **advantages**: the trajectories' rewards, group-relative (:func:`~memrl.train.advantages.grpo_advantages`;
   ``normalize_std=False`` is MemAgent's and Dr. GRPO's choice); a trajectory without a reward (a
   failure) gets none and is left out; DAPO's dynamic sampling drops groups whose rewards are all equal
   (no contrast); ADRPO's attribution weight (``Trajectory.info["advantage_weight"]``) multiplies.
2. **samples**: every LLM call of a kept trajectory that has token ids is one sequence (prompt + completion)
   carrying its trajectory's advantage: MemAgent's final reward is given to every reading step, as in the
   original; tool-loop trajectories contribute each model turn.
3. **loss**: every log-probability is that of the *behaviour distribution* the rollout was drawn from:
   the logits under the step's recorded grammar (replayed over the completion with xgrammar) and
   temperature (:mod:`memrl.train.logprobs`). Old log-probabilities are those of the current weights
   before the first optimizer step (with one optimizer step, taken from the same forward pass); the
   back-end's own are only compared (``rollout_logprob_diff``, ~1e-6: the same function computed them).
   PPO-clip with DAPO's decoupled range (:func:`~memrl.train.losses.policy_loss`), plus ``kl_coef`` x
   KL(pi || pi_ref) when ``kl_coef > 0``. **The reference** pi_ref is the run's initial policy *under the
   same constraint and temperature* as the sample (a frozen copy; with LoRA, the base model with the
   adapter switched off): both distributions live on the tokens the grammar allows, so the KL measures
   how far training moved the policy the agent acts with, not the mass outside the grammar that neither
   can sample. Aggregated over the whole batch exactly as ``loss_agg`` says, however it is split into
   micro-batches.
4. **step**: ``epochs`` passes over the batch, each of ``mini_batches`` optimizer steps (AdamW, gradient
   clipping); with more than one optimizer step, the later ones are off-policy and the clip range
   matters (``mini_batches`` alone uses each sample once: only ``epochs`` > 1 trains a sample again after
   the weights it was scored with have moved, as PPO's epochs do).

**What a step logs** (its row of ``metrics.jsonl``, :mod:`memrl.train.diagnostics`): the reward's mean and
spread, the groups with reward variance, reply lengths, ``kl_to_start`` (KL of the policy that drew the
batch to the run's starting policy, on the batch's completion tokens, before the step's update: 0 at the
first step; measured with ``measure_kl`` whatever ``kl_coef`` is, never added to the loss when that is 0),
the PPO ratio's mean / max / min and the clip fraction over the step and per optimizer step
(``per_optimizer_step``: the first is on-policy, ratio 1, nothing clipped).

**LoRA** (``lora_rank > 0``, peft): only low-rank adapters train; checkpoints hold the merged model
(a folder ``LocalLLM`` and ``memrl eval --model`` load) plus the adapter and optimizer state, and a resumed
run reloads the base model and the adapter (:meth:`PolicyTrainer.model_to_load`).

This is the single-machine path (CPU or one GPU); :mod:`memrl.train.loop` drives it (rollouts, steps,
checkpoints, resume). The advantage and loss functions are plain torch, written to be reused by a verl
integration for clusters, which memrl does not have yet.
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from memrl.agents.trajectory import Trajectory
from memrl.config import option
from memrl.errors import ConfigError
from memrl.llm.local.adapters import base_model_name
from memrl.train.advantages import dynamic_sampling_mask, grpo_advantages
from memrl.train.checkpoints import LocalModelTrainer, checkpoint_folder
from memrl.train.diagnostics import batch_stats, kl_to_start
from memrl.train.logprobs import Sample
from memrl.train.losses import KLKind, LossAgg, kl_penalty, policy_loss

__all__ = ["LocalModelTrainer", "PolicyTrainer", "Sample", "TrainerConfig", "checkpoint_folder"]


@dataclass
class TrainerConfig:
    lr: float = option(1e-6, "learning rate")
    optimizer: Literal["adamw", "sgd"] = option("adamw", "adamw, or plain sgd (exact, for checks)")
    weight_decay: float = option(0.0, "weight decay")
    clip_low: float = option(0.2, "PPO clip: ratio >= 1 - clip_low")
    clip_high: float = option(0.28, "PPO clip: ratio <= 1 + clip_high (DAPO clip-higher)")
    loss_agg: LossAgg = option(
        "token-mean", "token-mean (DAPO), seq-mean-token-mean (GRPO), seq-mean-token-sum"
    )
    normalize_std: bool = option(False, "divide advantages by the group's std (GRPO); MemAgent does not")
    dynamic_sampling: bool = option(True, "drop groups whose rewards are all equal (DAPO)")
    kl_coef: float = option(0.0, "KL-to-reference coefficient in the loss (MemAgent: 0.001)")
    kl_kind: KLKind = option("low_var_kl", "KL estimator of the loss term")
    measure_kl: bool = option(
        True, "log kl_to_start (KL to the starting policy) every step, kl_coef 0 included: one extra "
        "forward pass without gradient per update; with LoRA the adapter switched off is the starting "
        "policy, without LoRA a frozen copy of the model is kept (memory: --no-measure-kl)",
    )  # fmt: skip
    mini_batches: int = option(1, "optimizer steps per pass over a batch of rollouts (each sample used once)")
    epochs: int = option(
        1, "passes over each batch (PPO epochs), each of mini_batches optimizer steps: > 1 trains a sample "
        "again after the weights moved, so the PPO ratio and clip range come into play",
    )  # fmt: skip
    micro_batch: int = option(8, "at most this many sequences per forward/backward pass (memory)")
    micro_tokens: int = option(
        4096, "at most this many tokens per forward/backward pass (a shared prompt counts once)"
    )
    lora_rank: int = option(0, "LoRA rank (peft); 0 = full fine-tuning")
    lora_alpha: float = option(32.0, "LoRA scaling numerator (scale = alpha / rank)")
    lora_targets: str = option("all-linear", "modules LoRA adapts: all-linear, or comma-separated names")
    max_grad_norm: float = option(1.0, "gradient clipping")
    shuffle_seed: int = option(0, "shuffling of samples into mini-batches")

    def __post_init__(self) -> None:
        if (
            self.lr <= 0
            or min(self.mini_batches, self.epochs, self.micro_batch) < 1
            or self.max_grad_norm <= 0
        ):
            raise ConfigError(
                "need lr > 0, mini_batches >= 1, epochs >= 1, micro_batch >= 1, max_grad_norm > 0"
            )
        if not (0 <= self.clip_low < 1 and self.clip_high >= 0):
            raise ConfigError(
                f"need 0 <= clip_low < 1 and clip_high >= 0, got {self.clip_low}, {self.clip_high}"
            )
        if self.kl_coef < 0:
            raise ConfigError("kl_coef must be >= 0")
        if self.lora_rank < 0 or self.micro_tokens < 1:
            raise ConfigError("lora_rank must be >= 0 (0 = full fine-tuning) and micro_tokens >= 1")


class PolicyTrainer(LocalModelTrainer):
    """Updates a LocalLLM's model from groups of its own trajectories; see the module docstring."""

    def __init__(
        self, llm: Any, config: TrainerConfig | None = None, *, reference: str | None = None
    ) -> None:
        """``reference``: the folder of the initial policy, for the KL term of a resumed full fine-tuning
        run (a run that starts from scratch uses a frozen copy of ``llm``'s model and records its folder in
        checkpoints; with LoRA the reference is the base model, adapters off)."""
        super().__init__(llm)
        self.config = config or TrainerConfig()
        cfg = self.config
        if cfg.lora_rank:
            from memrl.train.lora import add_lora

            add_lora(self.model, rank=cfg.lora_rank, alpha=cfg.lora_alpha, targets=cfg.lora_targets)
        # what a saved adapter names as its base, decided (and refused for an adapter folder) before training
        self.base_name = base_model_name(getattr(llm, "spec", None)) if cfg.lora_rank else None
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.SGD
        self.optimizer = opt(trainable, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.reference = None
        self.reference_path = reference or getattr(llm, "path", None)
        if self.keeps_start and not cfg.lora_rank:
            if reference is not None and reference != getattr(llm, "path", None):
                from memrl.llm.local.hf_models import load_model

                self.reference = load_model(reference, device=str(next(self.model.parameters()).device))[0]
            else:
                self.reference = copy.deepcopy(self.model).eval()
            for p in self.reference.parameters():
                p.requires_grad_(False)
        self.steps_done = 0

    @property
    def keeps_start(self) -> bool:
        """Whether updates compute the starting policy's log-probabilities (the KL term or its metric)."""
        return self.config.kl_coef > 0 or self.config.measure_kl

    def reference_logprobs(self, samples: Sequence[Sample]) -> torch.Tensor:
        """Log-probabilities under the KL reference (see the module docstring), no gradient."""
        with torch.no_grad():
            if self.config.lora_rank:
                from memrl.train.lora import adapters_disabled

                with adapters_disabled(self.model):
                    return self.token_logprobs(self.model, samples)[0]
            return self.token_logprobs(self.reference, samples)[0]

    # ---- samples ------------------------------------------------------------------------------------
    def samples(self, groups: Sequence[Sequence[Trajectory]]) -> tuple[list[Sample], dict[str, float]]:
        """Advantages per trajectory, then one :class:`Sample` per generated step of the kept ones."""
        cfg = self.config
        trajs = [t for g in groups for t in g]
        ids = [i for i, g in enumerate(groups) for _ in g]
        rewards = torch.tensor([math.nan if t.reward is None else float(t.reward) for t in trajs])
        adv = grpo_advantages(rewards, ids, normalize_std=cfg.normalize_std)
        keep = ~torch.isnan(rewards)
        if cfg.dynamic_sampling:
            keep &= dynamic_sampling_mask(rewards, ids)
        weights = torch.tensor([float(t.info.get("advantage_weight", 1.0)) for t in trajs])
        adv = adv * weights
        keyed: list[tuple[tuple[int, int, int], Sample]] = []
        for i, t in enumerate(trajs):
            if not keep[i]:
                continue
            for k, s in enumerate(t.steps):
                if s.error is None and s.prompt_ids and s.completion_ids:
                    temp = s.temperature if s.temperature is not None else 1.0
                    sample = Sample(list(s.prompt_ids), list(s.completion_ids), float(adv[i]), s.logprobs,
                                    ids[i], s.constraint, temp)  # fmt: skip
                    keyed.append(((ids[i], k, i), sample))
        # the k-th call of every rollout of a group side by side: their prompts share a prefix (the same
        # chunk of a document, the same question), which a micro-batch then runs once
        out = [sample for _, sample in sorted(keyed, key=lambda x: x[0])]
        scored = rewards[~torch.isnan(rewards)]
        stats = {
            "trajectories": float(len(trajs)),
            "failed": float(len(trajs) - len(scored)),
            "reward_mean": float(scored.mean()) if len(scored) else math.nan,
            **batch_stats(groups),
            "groups": float(len(groups)),
            "groups_kept": float(len({ids[i] for i in range(len(trajs)) if keep[i]})),
            "samples": float(len(out)),
        }
        return out, stats

    # ---- update ------------------------------------------------------------------------------------
    def step(self, groups: Sequence[Sequence[Trajectory]]) -> dict[str, Any]:
        """One policy update from these groups; returns metrics (``skipped`` = 1 when nothing had signal:
        then no update and no ``kl_to_start``, the policy being the one the previous update left)."""
        samples, stats = self.samples(groups)
        self.steps_done += 1
        if not samples:
            return {**stats, "skipped": 1.0, "step": float(self.steps_done)}
        with self.llm._lock:  # no generation while the weights change
            try:
                return {**stats, **self._update(samples), "skipped": 0.0, "step": float(self.steps_done)}
            finally:
                self.scorer.clear()

    def micro_batches(self, samples: list[Sample]) -> list[list[Sample]]:
        """Consecutive samples packed up to ``micro_batch`` sequences and ``micro_tokens`` tokens, a prompt
        prefix shared with a neighbour counted once (the same call of a group's rollouts are neighbours:
        their shared prefix runs once)."""
        cfg = self.config
        from memrl.llm.decoding import MIN_SHARED, _lcp

        out: list[list[Sample]] = []
        cost = 0
        for s in samples:
            shared = (
                max((_lcp(x.prompt_ids, s.prompt_ids, len(s.prompt_ids) - 1) for x in out[-1]), default=0)
                if out
                else 0
            )
            add = len(s.completion_ids) + len(s.prompt_ids) - (shared if shared >= MIN_SHARED else 0)
            if not out or len(out[-1]) >= cfg.micro_batch or cost + add > cfg.micro_tokens:
                out.append([])
                cost = len(s.prompt_ids) + len(s.completion_ids)
            else:
                cost += add
            out[-1].append(s)
        return out

    def _update(self, samples: list[Sample]) -> dict[str, Any]:
        cfg = self.config
        model = self.model
        micro = self.micro_batches(samples)
        # With one optimizer step the weights cannot change before a micro-batch's forward pass, so its
        # old log-probabilities are its own, detached: no separate pass (a third of the update's cost).
        on_policy = cfg.mini_batches == 1 and cfg.epochs == 1
        old: list[torch.Tensor | None] = [None] * len(micro)
        masks: list[torch.Tensor | None] = [None] * len(micro)
        start: list[torch.Tensor | None] = [None] * len(micro)  # the starting policy's, for KL
        diffs: list[float] = []

        def compare(mb: list[Sample], lp: torch.Tensor, comp: torch.Tensor) -> None:
            for i, s in enumerate(mb):
                if s.rollout_logprobs and len(s.rollout_logprobs) == len(s.completion_ids):
                    mine = lp[i][comp[i].bool()].detach().cpu()
                    diffs.append(float((mine - torch.tensor(s.rollout_logprobs)).abs().mean()))

        with torch.no_grad():
            for j, mb in enumerate(micro):
                if not on_policy:
                    old[j], masks[j] = self.token_logprobs(model, mb)
                    compare(mb, old[j], masks[j])
                if self.keeps_start:
                    start[j] = self.reference_logprobs(mb)
        # each pass over the batch reshuffles the micro-batches into mini_batches chunks (the first pass
        # with the generator's first draw, as when there was only one)
        rng = random.Random(cfg.shuffle_seed + self.steps_done)
        plan: list[list[int]] = []
        for _ in range(cfg.epochs):
            order = list(range(len(micro)))
            rng.shuffle(order)
            plan += [c for c in (order[k :: cfg.mini_batches] for k in range(cfg.mini_batches)) if c]
        per_step: list[dict[str, float]] = []
        grad_norms = []
        # The model stays in eval mode (no dropout): old and new log-probabilities must come from the
        # same function, or the ratio is not 1 before any step and the clip fires for nothing.
        try:
            for chunk in plan:
                n_tok = float(
                    sum(len(s.completion_ids) for j in chunk for s in micro[j])
                )  # = completion mask
                n_seq = sum(len(micro[j]) for j in chunk)
                self.optimizer.zero_grad(set_to_none=True)
                got: dict[str, float] = {}
                for j in chunk:
                    mb = micro[j]
                    lp, comp = self.token_logprobs(model, mb)
                    if on_policy:
                        old[j], masks[j] = lp.detach(), comp
                        compare(mb, lp, comp)
                    adv = torch.tensor([s.advantage for s in mb], device=lp.device)
                    old_lp = old[j]
                    assert old_lp is not None
                    loss, m = policy_loss(lp, old_lp, adv, comp, cfg.clip_low, cfg.clip_high, cfg.loss_agg)
                    if cfg.kl_coef > 0:
                        kl, km = kl_penalty(lp, start[j], comp, cfg.kl_kind, cfg.loss_agg)
                        loss = loss + cfg.kl_coef * kl
                        m.update(km)
                    # scale the micro-batch's aggregate to its share of the mini-batch's aggregate
                    share = (
                        float(comp.sum()) / max(n_tok, 1) if cfg.loss_agg == "token-mean" else len(mb) / n_seq
                    )
                    (loss * share).backward()
                    for k, v in m.items():  # maxima are maxima, minima minima, the rest is weighted
                        if k.endswith("_max"):
                            got[k] = max(got.get(k, v), v)
                        elif k.endswith("_min"):
                            got[k] = min(got.get(k, v), v)
                        elif k != "n_tokens":
                            got[k] = got.get(k, 0.0) + v * share
                per_step.append(got)
                trainable = [p for p in model.parameters() if p.requires_grad]
                grad_norms.append(float(torch.nn.utils.clip_grad_norm_(trainable, cfg.max_grad_norm)))
                self.optimizer.step()
        finally:
            self.optimizer.zero_grad(set_to_none=True)
        totals: dict[str, Any] = {}
        for k in per_step[0]:  # over the optimizer steps: maxima, minima, and the mean of the rest
            vals = [g[k] for g in per_step]
            pick = max if k.endswith("_max") else min if k.endswith("_min") else None
            totals[k] = pick(vals) if pick else sum(vals) / len(vals)
        totals["n_tokens"] = float(sum(len(s.completion_ids) for s in samples))
        totals["grad_norm"] = sum(grad_norms) / len(grad_norms)
        totals["optimizer_steps"] = float(len(grad_norms))
        totals["per_optimizer_step"] = [
            {k: g[k] for k in ("ratio_mean", "ratio_max", "ratio_min", "clip_frac")} for g in per_step
        ]
        if self.config.measure_kl:  # the policy that drew the batch (weights before this step's update)
            totals.update(kl_to_start([(old[j], start[j], masks[j]) for j in range(len(micro))]))
        if diffs:
            totals["rollout_logprob_diff"] = sum(diffs) / len(diffs)
        return totals

    # ---- checkpoints -------------------------------------------------------------------------------
    def save(self, folder: str | Path) -> Path:
        """Model (merged, with LoRA), tokenizer, optimizer state, step count, config, KL reference folder,
        and with LoRA the adapter and the base model's folder (see :meth:`save_checkpoint`)."""
        state = {"optimizer": self.optimizer.state_dict(), "steps_done": self.steps_done,
                 "config": asdict(self.config), "reference": self.reference_path}  # fmt: skip
        if self.config.lora_rank:
            state["base_model"] = self.reference_path
        return self.save_checkpoint(folder, state)

    def _save_model(self, folder: Path) -> None:
        if not self.config.lora_rank:
            return super()._save_model(folder)
        from memrl.train.lora import save_adapter, save_merged

        save_merged(self.model, folder)
        save_adapter(self.model, folder, self.base_name)

    @staticmethod
    def read_state(folder: str | Path) -> dict[str, Any]:
        """The trainer state saved in a checkpoint (step count, optimizer, config, reference folder)."""
        return torch.load(Path(folder) / "trainer_state.pt", weights_only=False)

    @staticmethod
    def model_to_load(folder: str | Path) -> str:
        """The model folder a resumed run loads into its LocalLLM: the checkpoint itself, or, for a LoRA
        run, the base model (the trainer then restores the adapter from the checkpoint)."""
        state = PolicyTrainer.read_state(folder)
        return str(state["base_model"]) if state.get("base_model") else str(folder)

    def load_state(self, folder: str | Path) -> None:
        """Optimizer state and step count (and with LoRA the adapter) from a checkpoint; the model itself
        is loaded by ``LocalLLM(PolicyTrainer.model_to_load(folder))``.

        The learning rate and weight decay are this trainer's config, not the saved ones.
        """
        state = self.read_state(folder)
        if self.config.lora_rank:
            from memrl.train.lora import load_adapter

            load_adapter(self.model, Path(folder))
        self.optimizer.load_state_dict(state["optimizer"])
        for group in self.optimizer.param_groups:
            group["lr"], group["weight_decay"] = self.config.lr, self.config.weight_decay
        self.steps_done = int(state["steps_done"])
