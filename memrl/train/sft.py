"""Supervised fine-tuning of a local model on expert trajectories (MemBuilder trains SFT, then ADRPO).

Every successful LLM call of an expert trajectory is one example: the prompt, rendered with the *student's*
chat template (:meth:`LocalLLM.prompt_ids`), and the expert's reply followed by the end-of-turn token, so
the student learns to stop. The loss is the mean negative log-likelihood over the reply tokens of a batch
(token-mean; exact however the batch is split into micro-batches). Examples longer than
``max_seq_tokens`` are skipped and counted; failed calls are never examples.

    memrl train sft-membuilder --dataset locomo --conv-id conv-30 --output-dir runs/sft
    memrl build --dataset locomo --conv-id conv-26 --provider local --model runs/sft/checkpoint

Writes ``OUTPUT_DIR/sft_metrics.jsonl`` (one row per optimizer step) and the checkpoint (a model folder,
with the optimizer state and step count; with ``lora_rank`` the merged model plus ``adapter.safetensors``,
the adapter alone, a few MB), every ``save_every`` steps and at the end. ``--resume`` loads the
checkpoint and continues at the next step (the example order is fixed by the seed), so an interrupted run
ends with the weights an uninterrupted one would have (tested).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from memrl.agents.trajectory import Trajectory
from memrl.config import option
from memrl.errors import ConfigError
from memrl.llm.local.adapters import base_model_name
from memrl.train.checkpoints import LocalModelTrainer
from memrl.train.logprobs import Sample

__all__ = ["SFTConfig", "SFTTrainer", "epochs_for", "sft_samples"]


@dataclass
class SFTConfig:
    lr: float = option(2e-5, "AdamW learning rate")
    epochs: int = option(2, "passes over the examples")
    batch_size: int = option(4, "examples per optimizer step")
    micro_batch: int = option(1, "examples per forward/backward pass (memory)")
    max_grad_norm: float = option(1.0, "gradient clipping")
    max_seq_tokens: int = option(4096, "skip (and count) longer examples")
    seed: int = option(0, "example order")
    save_every: int = option(10, "checkpoint every N optimizer steps (and at the end)")
    lora_rank: int = option(
        0, "LoRA rank (peft): only low-rank adapters train, saved as adapter.safetensors; 0 = every weight"
    )
    lora_alpha: float = option(32.0, "LoRA scaling numerator (scale = alpha / rank)")
    autocast: Literal["none", "bf16"] = option(
        "none",
        "bf16: forward and backward under torch.autocast(bfloat16), the weights and optimizer kept in fp32 "
        "(1.23x faster per step on a 2-core AVX-512 BF16 CPU; emulated and several times slower on an AVX2-only CPU, "
        "where a warning says so: docs/training.md, 'What SFT costs')",
    )

    def __post_init__(self) -> None:
        if self.autocast not in ("none", "bf16"):
            raise ConfigError(f"autocast must be 'none' or 'bf16', got {self.autocast!r}")
        if (
            self.lr <= 0
            or self.epochs < 1
            or self.batch_size < 1
            or self.micro_batch < 1
            or self.save_every < 1
            or self.lora_rank < 0
        ):
            raise ConfigError(
                "need lr > 0, epochs >= 1, batch_size >= 1, micro_batch >= 1, save_every >= 1, lora_rank >= 0"
            )


def epochs_for(epochs: int, minutes: float | None) -> int:
    """The epochs cap of a run given ``epochs`` passes or a time budget of ``minutes``: with a budget, as
    many passes as fit it (a one-pass cap would end a long budget early, unannounced: an SFT-only control
    given another arm's time must get that time)."""
    return 10**4 if minutes else epochs


def sft_samples(
    llm: Any,
    trajectories: Sequence[Trajectory],
    max_seq_tokens: int = 4096,
    max_reply_tokens: int | None = None,
) -> tuple[list[Sample], dict]:
    """One :class:`Sample` (advantage unused) per successful step; and counts of what was left out.
    ``max_reply_tokens``: skip (as ``too_long``) replies longer than that, end-of-turn token included
    (a reply the answer budget would cut teaches the model not to stop in time)."""
    tok = llm.tokenizer
    end = next((tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>")
                if t in tok.get_vocab()), tok.eos_token_id)  # fmt: skip
    out: list[Sample] = []
    skipped = {"failed": 0, "empty": 0, "too_long": 0}
    for t in trajectories:
        for s in t.steps:
            if t.failure is not None or s.error is not None:
                skipped["failed"] += 1
                continue
            if not s.response.strip():
                skipped["empty"] += 1
                continue
            prompt = llm.prompt_ids(s.messages)
            completion = tok.encode(s.response, add_special_tokens=False) + ([end] if end is not None else [])
            if len(prompt) + len(completion) > max_seq_tokens or (
                max_reply_tokens is not None and len(completion) > max_reply_tokens
            ):
                skipped["too_long"] += 1
                continue
            out.append(Sample(prompt, completion, 0.0))
    return out, skipped


class SFTTrainer(LocalModelTrainer):
    """Fine-tunes a LocalLLM's model in place on (prompt, expert reply) examples."""

    def __init__(self, llm: Any, config: SFTConfig | None = None) -> None:
        super().__init__(llm)
        self.config = config or SFTConfig()
        if self.config.lora_rank:
            from memrl.train.lora import add_lora

            # the adapters' random start comes from the seed, so a run is reproducible (and a resumed one,
            # which restores them, ends as an uninterrupted one)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.config.seed)
                add_lora(self.model, rank=self.config.lora_rank, alpha=self.config.lora_alpha)
        # what a saved adapter names as its base, decided (and refused for an adapter folder) before training
        self.base_name = base_model_name(getattr(llm, "spec", None)) if self.config.lora_rank else None
        self.optimizer = torch.optim.AdamW(
            [p for p in self.model.parameters() if p.requires_grad], lr=self.config.lr
        )
        if self.config.autocast == "bf16":
            from memrl.llm.cpu import warn_slow_bf16

            warn_slow_bf16(next(self.model.parameters()).device.type, "SFT (--autocast bf16)")

    def loss_on(self, samples: Sequence[Sample]) -> tuple[float, int]:
        """Mean NLL per reply token over ``samples`` without training (to compare before and after)."""
        total, n = 0.0, 0
        with torch.no_grad():
            for i in range(0, len(samples), self.config.micro_batch):
                lp, comp = self.token_logprobs(self.model, samples[i : i + self.config.micro_batch])
                total += float(-(lp * comp).sum())
                n += int(comp.sum())
        return total / max(n, 1), n

    def fit(
        self,
        samples: Sequence[Sample],
        output_dir: str | Path,
        *,
        progress: bool = True,
        resume: bool = False,
        max_steps: int | None = None,
        time_limit_s: float | None = None,
        on_step: Callable[[dict[str, Any]], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Train for ``epochs``; returns one metrics row per optimizer step (those of an earlier run included
        when resuming); saves ``OUTPUT_DIR/checkpoint`` every ``save_every`` steps and at the end.

        With ``resume`` the model must have been loaded from that checkpoint (for LoRA from its base model,
        :meth:`model_to_load`; ``memrl train sft-membuilder --resume`` does it): the optimizer state, the
        adapter (LoRA) and step count are read from it, and the steps it holds
        are skipped. ``max_steps`` / ``time_limit_s``: stop (with a checkpoint) after that many optimizer
        steps in all / after the first step that ends past that many seconds (a fixed budget). ``on_step``:
        called with each new step's metrics row, after the step (e.g. to evaluate the weights at set times)."""
        from tqdm.auto import tqdm

        from memrl.train.checkpoints import checkpoint_folder

        cfg = self.config
        if not samples:
            raise ConfigError("no SFT examples (every expert call failed, was empty or too long)")
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        log_path, ckpt = out / "sft_metrics.jsonl", out / "checkpoint"
        done = 0
        rows: list[dict[str, Any]] = []
        if resume:
            found = checkpoint_folder(ckpt)
            if found is None:
                raise ConfigError(f"--resume: no checkpoint in {ckpt}")
            state = torch.load(found / "trainer_state.pt", weights_only=False)
            if cfg.lora_rank:
                from memrl.train.lora import load_adapter

                load_adapter(self.model, found)
            self.optimizer.load_state_dict(state["optimizer"])
            done = int(state["steps_done"])
            old = log_path.read_text().splitlines() if log_path.exists() else []
            rows = [r for r in (json.loads(x) for x in old if x.strip()) if r["step"] <= done]
        elif checkpoint_folder(ckpt) is not None:
            raise ConfigError(
                f"{out} holds an earlier SFT run: pass --resume to continue it, or another --output-dir"
            )
        log_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        per_epoch = -(-len(samples) // cfg.batch_size)
        total = cfg.epochs * per_epoch
        if max_steps is not None:
            total = min(total, max_steps)
        t0 = time.perf_counter()
        bar = tqdm(total=total, initial=done, desc="sft", unit="step", disable=not progress)
        step = 0
        with log_path.open("a") as log:
            for epoch in range(cfg.epochs):
                order = list(samples)
                random.Random(cfg.seed + epoch).shuffle(order)
                for b in range(0, len(order), cfg.batch_size):
                    step += 1
                    if step > total:
                        break
                    if step <= done:
                        continue
                    row = self._step(order[b : b + cfg.batch_size], epoch + 1, step)
                    rows.append(row)
                    log.write(json.dumps(row) + "\n")
                    log.flush()
                    if on_step is not None:
                        on_step(row)
                    late = time_limit_s is not None and time.perf_counter() - t0 > time_limit_s
                    if step % cfg.save_every == 0 or step == total or late:
                        self._save(ckpt, step)
                    bar.update(1)
                    bar.set_postfix(loss=f"{row['loss']:.3f}")
                    if late:
                        total = step
                        break
        bar.close()
        return rows

    def train_step(self, batch: Sequence[Sample], epoch: int = 1, step: int = 1) -> dict[str, Any]:
        """One optimizer step on ``batch`` (no log, no checkpoint): for loops that build their examples as
        they go (:mod:`memrl.train.raft`); returns the step's metrics row."""
        return self._step(list(batch), epoch, step)

    def _step(self, batch: list[Sample], epoch: int, step: int) -> dict[str, Any]:
        cfg = self.config
        t0 = time.perf_counter()
        n_tok = sum(len(s.completion_ids) for s in batch)
        self.optimizer.zero_grad(set_to_none=True)
        nll = 0.0
        device = next(self.model.parameters()).device.type
        for i in range(0, len(batch), cfg.micro_batch):
            with torch.autocast(device, dtype=torch.bfloat16, enabled=cfg.autocast == "bf16"):
                lp, comp = self.token_logprobs(self.model, batch[i : i + cfg.micro_batch])
            loss = -(lp * comp).sum() / n_tok  # the batch's token mean, summed over micro-batches
            loss.backward()
            nll += float(loss.detach())
        grad = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"epoch": epoch, "step": step, "loss": nll, "tokens": n_tok, "grad_norm": grad,
                "seconds": round(time.perf_counter() - t0, 2)}  # fmt: skip

    def _save(self, folder: Path, step: int) -> None:
        state = {"sft": asdict(self.config), "steps_done": step, "optimizer": self.optimizer.state_dict()}
        if self.config.lora_rank:
            state["base_model"] = getattr(self.llm, "path", None)
        self.save_checkpoint(folder, state)

    def _save_model(self, folder: Path) -> None:
        """Every weight; with LoRA the merged model (a plain model folder) plus ``adapter.safetensors``."""
        if not self.config.lora_rank:
            return super()._save_model(folder)
        from memrl.train.lora import save_adapter, save_merged

        save_merged(self.model, folder)
        save_adapter(self.model, folder, self.base_name)

    @staticmethod
    def model_to_load(folder: str | Path) -> str:
        """What a resumed run loads: the checkpoint, or for LoRA its base model (the adapter is restored
        by :meth:`fit` with ``resume``)."""
        state = torch.load(Path(folder) / "trainer_state.pt", weights_only=False)
        return str(state["base_model"]) if state.get("base_model") else str(folder)
