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

from memrl.errors import ConfigError

__all__ = ["adapters_disabled", "add_lora", "load_adapter", "save_adapter", "save_merged"]

ADAPTER_FILE = "adapter.safetensors"


def _peft() -> Any:
    try:
        import peft
    except ImportError as e:  # pragma: no cover - the train extra is installed by the Makefile
        raise ConfigError("LoRA needs peft: pip install 'memrl[train]'") from e
    return peft


def add_lora(model: Any, *, rank: int, alpha: float, targets: str = "all-linear") -> Any:
    """Inject LoRA adapters into ``model`` (in place) and freeze everything else; returns ``model``."""
    peft = _peft()
    modules: Any = "all-linear" if targets == "all-linear" else [t.strip() for t in targets.split(",")]
    config = peft.LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=modules,
                             task_type="CAUSAL_LM")  # fmt: skip
    # inject_adapter_in_model does not resolve "all-linear"; name the linear layers (not the LM head)
    if modules == "all-linear":
        import torch

        names = {n.split(".")[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
        config.target_modules = sorted(names - {"lm_head"})
    peft.inject_adapter_in_model(config, model)
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name)
    return model


def lora_state(model: Any) -> dict[str, Any]:
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items() if "lora_" in k}


def save_adapter(model: Any, folder: Path) -> None:
    from safetensors.torch import save_file

    save_file(lora_state(model), str(folder / ADAPTER_FILE))


def load_adapter(model: Any, folder: Path) -> None:
    """Set the adapter weights saved in ``folder`` (the model must have the same adapters)."""
    from safetensors.torch import load_file

    state = load_file(str(Path(folder) / ADAPTER_FILE))
    missing = set(lora_state(model)) - set(state)
    if missing:
        raise ConfigError(f"{folder}: the adapter lacks {len(missing)} LoRA weights (another lora_rank?)")
    model.load_state_dict(state, strict=False)


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
    from peft.tuners.tuners_utils import BaseTunerLayer

    merged = copy.deepcopy(model)
    for name, module in list(merged.named_modules()):
        if isinstance(module, BaseTunerLayer):
            module.merge()
            parent = merged.get_submodule(name.rsplit(".", 1)[0]) if "." in name else merged
            setattr(parent, name.rsplit(".", 1)[-1], module.get_base_layer())
    merged.save_pretrained(folder)
