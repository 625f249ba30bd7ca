"""Supervised fine-tuning of a local model on expert trajectories (MemBuilder trains SFT, then ADRPO).

Every successful LLM call of an expert trajectory is one example: the prompt, rendered with the *student's*
chat template (:meth:`LocalLLM.prompt_ids`), and the expert's reply followed by the end-of-turn token, so
the student learns to stop. The loss is the mean negative log-likelihood over the reply tokens of a batch
(token-mean; exact however the batch is split into micro-batches). Examples longer than
``max_seq_tokens`` are skipped and counted; failed calls are never examples.

    memrl train sft-membuilder --dataset locomo --conv-id conv-30 --output-dir runs/sft
    memrl build --dataset locomo --conv-id conv-26 --provider local --model runs/sft/checkpoint

Writes ``OUTPUT_DIR/sft_metrics.jsonl`` (one row per optimizer step) and the checkpoint (a model folder).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from memrl.agents.trajectory import Trajectory
from memrl.config import option
from memrl.errors import ConfigError
from memrl.train.logprobs import Sample
from memrl.train.trainer import LocalModelTrainer

__all__ = ["SFTConfig", "SFTTrainer", "sft_samples"]


@dataclass
class SFTConfig:
    lr: float = option(2e-5, "AdamW learning rate")
    epochs: int = option(2, "passes over the examples")
    batch_size: int = option(4, "examples per optimizer step")
    micro_batch: int = option(1, "examples per forward/backward pass (memory)")
    max_grad_norm: float = option(1.0, "gradient clipping")
    max_seq_tokens: int = option(4096, "skip (and count) longer examples")
    seed: int = option(0, "example order")

    def __post_init__(self) -> None:
        if self.lr <= 0 or self.epochs < 1 or self.batch_size < 1 or self.micro_batch < 1:
            raise ConfigError("need lr > 0, epochs >= 1, batch_size >= 1, micro_batch >= 1")


def sft_samples(
    llm: Any, trajectories: Sequence[Trajectory], max_seq_tokens: int = 4096
) -> tuple[list[Sample], dict]:
    """One :class:`Sample` (advantage unused) per successful step; and counts of what was left out."""
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
            if len(prompt) + len(completion) > max_seq_tokens:
                skipped["too_long"] += 1
                continue
            out.append(Sample(prompt, completion, 0.0))
    return out, skipped


class SFTTrainer(LocalModelTrainer):
    """Fine-tunes a LocalLLM's model in place on (prompt, expert reply) examples."""

    def __init__(self, llm: Any, config: SFTConfig | None = None) -> None:
        super().__init__(llm)
        self.config = config or SFTConfig()
        self.optimizer = torch.optim.AdamW(
            [p for p in self.model.parameters() if p.requires_grad], lr=self.config.lr
        )

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
        self, samples: Sequence[Sample], output_dir: str | Path, *, progress: bool = True
    ) -> list[dict[str, Any]]:
        """Train for ``epochs``; returns one metrics row per optimizer step; saves ``OUTPUT_DIR/checkpoint``."""
        from tqdm.auto import tqdm

        cfg = self.config
        if not samples:
            raise ConfigError("no SFT examples (every expert call failed, was empty or too long)")
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        rows: list[dict[str, Any]] = []
        per_epoch = -(-len(samples) // cfg.batch_size)
        bar = tqdm(total=cfg.epochs * per_epoch, desc="sft", unit="step", disable=not progress)
        with (out / "sft_metrics.jsonl").open("w") as log:
            for epoch in range(cfg.epochs):
                order = list(samples)
                random.Random(cfg.seed + epoch).shuffle(order)
                for b in range(0, len(order), cfg.batch_size):
                    t0 = time.perf_counter()
                    batch = order[b : b + cfg.batch_size]
                    n_tok = sum(len(s.completion_ids) for s in batch)
                    self.optimizer.zero_grad(set_to_none=True)
                    nll = 0.0
                    for i in range(0, len(batch), cfg.micro_batch):
                        lp, comp = self.token_logprobs(self.model, batch[i : i + cfg.micro_batch])
                        loss = -(lp * comp).sum() / n_tok  # the batch's token mean, summed over micro-batches
                        loss.backward()
                        nll += float(loss.detach())
                    grad = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm))
                    self.optimizer.step()
                    row = {"epoch": epoch + 1, "step": len(rows) + 1, "loss": nll, "tokens": n_tok,
                           "grad_norm": grad, "seconds": round(time.perf_counter() - t0, 2)}  # fmt: skip
                    rows.append(row)
                    log.write(json.dumps(row) + "\n")
                    log.flush()
                    bar.update(1)
                    bar.set_postfix(loss=f"{nll:.3f}")
        bar.close()
        self.optimizer.zero_grad(set_to_none=True)
        self.save_checkpoint(out / "checkpoint", {"sft": asdict(cfg), "steps_done": len(rows)})
        return rows
