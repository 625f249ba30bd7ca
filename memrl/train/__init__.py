"""memrl.train: GRPO/DAPO advantages and losses, the local :class:`PolicyTrainer` and its loop.

Imported lazily (torch loads only when a name is used)::

    from memrl.train import PolicyTrainer, TrainerConfig, LoopConfig, train
"""

from __future__ import annotations

from typing import Any

_NAMES = {
    "HeldOut": "memrl.train.heldout",
    "PolicyTrainer": "memrl.train.trainer",
    "TrainerConfig": "memrl.train.trainer",
    "LoopConfig": "memrl.train.loop",
    "MemAgentTasks": "memrl.train.loop",
    "train": "memrl.train.loop",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        import importlib

        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module 'memrl.train' has no attribute {name!r}")
