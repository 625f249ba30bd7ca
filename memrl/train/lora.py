"""LoRA adapters (peft) on a LocalLLM's model, in place, and how they are saved and restored.

``peft.inject_adapter_in_model`` adds low-rank adapters inside the LocalLLM's own transformers model, so
generation (the rollouts) and training use the adapted weights with no wrapper in between. Only the adapter
weights train. A checkpoint holds the merged model (``LocalLLM(folder)`` and ``memrl eval --model`` load
it as a plain model folder) and ``adapter.safetensors`` with the adapter weights, from which a resumed run
restores the exact state (base model + adapter)::

    add_lora(model, rank=16, alpha=32, targets="all-linear")
    with adapters_disabled(model): ...          # the base model (the KL reference)
    save_merged(model, folder); save_adapter(model, folder); load_adapter(model, folder)

Needs the ``train`` extra (``pip install 'memrl[train]'``).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memrl.llm.local.adapters import ADAPTER_FILE, inject_lora, merge, set_weights, write_meta

__all__ = ["adapters_disabled", "add_lora", "load_adapter", "save_adapter", "save_merged"]


def add_lora(model: Any, *, rank: int, alpha: float, targets: str = "all-linear") -> Any:
    """Inject LoRA adapters into ``model`` (in place) and freeze everything else; returns ``model``."""
    inject_lora(model, rank=rank, alpha=alpha, targets=targets)
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name)
    return model


def lora_state(model: Any) -> dict[str, Any]:
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items() if "lora_" in k}


def save_adapter(
    model: Any, folder: Path, base_model: str | None = None, dtype: str | None = None, **extra: Any
) -> None:
    """``folder/adapter.safetensors`` (in ``dtype``, default the weights' own); with ``base_model``, also
    ``folder/adapter.json``, which makes the folder loadable on its own (``LocalLLM(folder)``,
    :mod:`memrl.llm.local.adapters`)."""
    import torch
    from safetensors.torch import save_file

    state = lora_state(model)
    if dtype is not None:
        state = {k: v.to(getattr(torch, dtype)) for k, v in state.items()}
    save_file(state, str(Path(folder) / ADAPTER_FILE))
    shape = getattr(model, "_memrl_lora", None)
    if base_model is not None and shape is not None:
        kept = {"dtype": dtype} if dtype else {}
        write_meta(folder, base_model=base_model, rank=shape["rank"], alpha=shape["alpha"],
                   targets=shape["targets"], **kept, **extra)  # fmt: skip


def load_adapter(model: Any, folder: Path) -> None:
    """Set the adapter weights saved in ``folder`` (the model must have the same adapters)."""
    set_weights(model, folder)


@contextlib.contextmanager
def adapters_disabled(model: Any) -> Iterator[None]:
    """Run ``model`` as its base model (LoRA layers bypassed) inside the block."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    for m in layers:
        m.enable_adapters(False)
    try:
        yield
    finally:
        for m in layers:
            m.enable_adapters(True)


def save_merged(model: Any, folder: Path) -> None:
    """Save ``model`` with its adapters merged into the weights, as a plain transformers model folder."""
    merge(copy.deepcopy(model)).save_pretrained(folder)
