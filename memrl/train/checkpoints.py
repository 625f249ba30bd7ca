"""What every local trainer (:mod:`memrl.train.trainer`'s GRPO, :mod:`memrl.train.sft`) shares: the
LocalLLM's model, log-probabilities of token batches, and checkpoints that a crash cannot leave half
written (:func:`checkpoint_folder` finds the complete one)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from memrl.train.logprobs import PolicyLogProbs, Sample

__all__ = ["LocalModelTrainer", "checkpoint_folder"]


class LocalModelTrainer:
    """What every local trainer shares: the LocalLLM's model, token batches, log-probs, checkpoints."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.model = llm.hf_model
        self.scorer = PolicyLogProbs(llm)

    # ---- log-probabilities --------------------------------------------------------------------------
    def token_logprobs(self, model: Any, samples: Sequence[Sample]) -> tuple[torch.Tensor, torch.Tensor]:
        """Completion log-probabilities ``[B, L]`` under ``model``'s behaviour distribution, and their mask
        (:class:`~memrl.train.logprobs.PolicyLogProbs`)."""
        return self.scorer(model, samples)

    def _save_model(self, folder: Path) -> None:
        self.model.save_pretrained(folder)

    def save_checkpoint(self, folder: str | Path, state: dict[str, Any]) -> Path:
        """The model and tokenizer (loadable by ``LocalLLM(folder)``) plus ``state`` (trainer_state.pt).

        Written to ``FOLDER.part``, then swapped in: the previous checkpoint is renamed ``FOLDER.old``
        until the new one is in place, so a crash at any point leaves one complete checkpoint
        (:func:`checkpoint_folder` finds it).
        """
        import shutil

        folder = Path(folder)
        tmp, old = folder.with_name(folder.name + ".part"), folder.with_name(folder.name + ".old")
        shutil.rmtree(tmp, ignore_errors=True)  # a stale half-written one from a crash
        tmp.mkdir(parents=True)
        self._save_model(tmp)
        self.llm.tokenizer.save_pretrained(tmp)
        torch.save(state, tmp / "trainer_state.pt")
        if folder.exists():
            shutil.rmtree(old, ignore_errors=True)
            folder.rename(old)
        tmp.rename(folder)
        shutil.rmtree(old, ignore_errors=True)
        return folder


def checkpoint_folder(folder: str | Path) -> Path | None:
    """The complete checkpoint at ``folder``, or the previous one (``FOLDER.old``) if a save was cut."""
    folder = Path(folder)
    for candidate in (folder, folder.with_name(folder.name + ".old")):
        if (candidate / "trainer_state.pt").is_file():
            return candidate
    return None
