"""LoRA adapter folders: a trained adapter kept on its own (a few MB) and loaded onto its base model.

An adapter folder holds ``adapter.safetensors`` (the LoRA weights, as peft names them inside the model) and
``adapter.json`` (what they belong to: the base model, rank, alpha, the adapted layers). It is what
``memrl train`` writes beside each checkpoint and what memrl ships for its trained agents: any place that
takes a local model (``LocalLLM(path)``, ``--provider local --model PATH``) takes such a folder too. The
base model is loaded as usual (``base_model``: the offline default, a folder, a ``.gguf`` file or a hub id),
the adapters injected, their weights set, and merged into the base weights: generation runs a plain model.

    write_meta(folder, base_model="smollm2-135m-instruct", rank=16, alpha=32, targets=["q_proj", ...])
    is_adapter_folder(folder)                    # adapter.json and adapter.safetensors, no config.json
    model, tok = load_merged(folder, device="cpu", dtype="float32")

Needs peft (the ``train`` extra) to load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memrl.errors import ConfigError
from memrl.llm.local.packaged import (
    ADAPTER_FILE,
    ADAPTER_META,
    PACKAGED,
    is_adapter_folder,
    packaged_adapter,
    packaged_adapters,
)

__all__ = ["ADAPTER_FILE", "ADAPTER_META", "PACKAGED", "base_model_name", "inject_lora", "is_adapter_folder", "load_merged",
           "packaged_adapter", "packaged_adapters", "read_meta", "write_meta"]  # fmt: skip

FORMAT = 1


def write_meta(folder: str | Path, *, base_model: str, rank: int, alpha: float, targets: list[str],
               **extra: Any) -> Path:  # fmt: skip
    """``folder/adapter.json``: the base model and the LoRA shape (``extra``: free provenance fields)."""
    meta = {"format": FORMAT, "base_model": base_model, "lora_rank": int(rank), "lora_alpha": float(alpha),
            "target_modules": sorted(targets), **extra}  # fmt: skip
    path = Path(folder) / ADAPTER_META
    path.write_text(json.dumps(meta, indent=1) + "\n")
    return path


def read_meta(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / ADAPTER_META
    try:
        meta = json.loads(path.read_text())
        base, rank, alpha, targets = (meta["base_model"], meta["lora_rank"], float(meta["lora_alpha"]),
                                      meta["target_modules"])  # fmt: skip
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise ConfigError(
            f"{path}: not an adapter description ({type(e).__name__}: {e}); it needs base_model, lora_rank, "
            "lora_alpha and target_modules"
        ) from e
    if (
        not isinstance(base, str)
        or not base
        or not isinstance(rank, int)
        or isinstance(rank, bool)
        or rank < 1
        or not isinstance(targets, list)
        or not targets
        or not all(isinstance(t, str) and t for t in targets)
    ):
        raise ConfigError(
            f"{path}: base_model must be a name, lora_rank an integer >= 1, target_modules a list of layer names"
        )
    return {**meta, "base_model": base, "lora_rank": rank, "lora_alpha": alpha, "target_modules": targets}


def base_model_name(spec: str | None) -> str:
    """How a trained adapter names its base model: the offline default by its name (also when a resumed run
    loaded it from its converted folder), a local path made absolute (an adapter folder too: the new adapter
    stacks on it, see :func:`load_merged`), a shipped adapter as ``memrl:NAME``, a hub id as given."""
    from memrl.llm.local.hf_models import DEFAULT_MODEL, SMOLLM2_GGUF
    from memrl.loading import cache_root

    if spec is None or spec.lower() in (DEFAULT_MODEL, SMOLLM2_GGUF.lower()):
        return DEFAULT_MODEL
    if spec.startswith(PACKAGED):  # a shipped adapter: named as shipped (stacked, see load_merged)
        return spec
    path = Path(spec).expanduser()
    if path.exists() and path.resolve() == (cache_root() / "models" / DEFAULT_MODEL).resolve():
        return DEFAULT_MODEL
    return str(path.resolve()) if path.exists() else spec


def _peft() -> Any:
    try:
        import peft
    except ImportError as e:
        raise ConfigError("LoRA adapters need peft: pip install 'memrl[train]'") from e
    return peft


def inject_lora(model: Any, *, rank: int, alpha: float, targets: str | list[str] = "all-linear") -> list[str]:
    """Inject LoRA adapters into ``model`` in place (peft, dropout 0); returns the adapted layer names.
    ``all-linear``: every ``nn.Linear`` but the LM head (peft's ``inject_adapter_in_model`` does not
    resolve that name itself)."""
    peft = _peft()
    if targets == "all-linear":
        import torch

        names = {n.split(".")[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
        modules = sorted(names - {"lm_head"})
    elif isinstance(targets, str):
        modules = sorted(t.strip() for t in targets.split(",") if t.strip())
    else:
        modules = sorted(targets)
    config = peft.LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=modules,
                             task_type="CAUSAL_LM")  # fmt: skip
    try:
        peft.inject_adapter_in_model(config, model)
    except ValueError as e:  # peft: a target module the model does not have
        raise ConfigError(f"LoRA layers {modules} do not fit the model: {e}") from e
    model._memrl_lora = {"rank": rank, "alpha": alpha, "targets": modules}
    return modules


def set_weights(model: Any, folder: str | Path) -> None:
    """Set the adapter weights saved in ``folder`` (the model must carry the same adapters)."""
    from safetensors.torch import load_file

    path = Path(folder) / ADAPTER_FILE
    try:
        state = load_file(str(path))
    except Exception as e:  # safetensors raises its own error types for a damaged file
        raise ConfigError(f"{path}: not a readable safetensors file ({e})") from e
    own = {k: v.shape for k, v in model.state_dict().items() if "lora_" in k}
    missing, extra = set(own) - set(state), set(state) - set(own)
    shaped = [k for k in set(own) & set(state) if tuple(state[k].shape) != tuple(own[k])]
    if missing or extra or shaped:
        raise ConfigError(
            f"{folder}: the adapter does not fit the model ({len(missing)} LoRA weights missing, "
            f"{len(extra)} unknown, {len(shaped)} of another shape; another lora_rank, target_modules or "
            "base model?)"
        )
    model.load_state_dict(state, strict=False)


def merge(model: Any) -> Any:
    """Fold every LoRA layer into its base layer (in place) and drop the adapters: a plain model."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    for name, module in list(model.named_modules()):
        if isinstance(module, BaseTunerLayer):
            module.merge()
            parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
            setattr(parent, name.rsplit(".", 1)[-1], module.get_base_layer())
    for attr in ("peft_config", "_memrl_lora"):  # a plain model again: another adapter may be injected
        if hasattr(model, attr):
            delattr(model, attr)
    return model


#: How many adapters may stack (an adapter whose base is an adapter: RL on top of SFT).
MAX_STACK = 4


def load_merged(folder: str | Path, *, device: str = "cpu", dtype: str = "float32",
                cache_dir: str | Path | None = None, _seen: tuple[str, ...] = ()) -> tuple[Any, Any]:  # fmt: skip
    """``(model, tokenizer)``: the base model of ``folder``'s adapter with the adapter merged in. The base
    may itself be an adapter (a folder or ``memrl:NAME``: an adapter trained on top of another one, as
    ADRPO on top of the SFT builder); it is merged first, up to :data:`MAX_STACK` deep."""
    from memrl.llm.local.hf_models import ensure_local_model, load_model

    meta = read_meta(folder)
    import torch

    if not isinstance(getattr(torch, dtype, None), torch.dtype):
        raise ConfigError(f"dtype must be a torch dtype name like 'float32' or 'bfloat16', got {dtype!r}")
    base = ensure_local_model(meta["base_model"], cache_dir)
    here = str(Path(folder).resolve())
    if is_adapter_folder(base):
        if str(Path(base).resolve()) in (*_seen, here) or len(_seen) + 1 >= MAX_STACK:
            chain = " -> ".join((*_seen, here, str(Path(base).resolve())))
            raise ConfigError(f"adapters stacked in a loop or over {MAX_STACK} deep: {chain}")
        model, tok = load_merged(base, cache_dir=cache_dir, _seen=(*_seen, here))
    else:
        model, tok = load_model(base, device="cpu", dtype="float32")
    inject_lora(model, rank=meta["lora_rank"], alpha=meta["lora_alpha"], targets=meta["target_modules"])
    set_weights(model, folder)
    merge(model)  # in float32, then the weights (not the buffers: RoPE's inv_freq stays float32) cast
    for p in model.parameters():
        p.data = p.data.to(getattr(torch, dtype))
    return model.to(device).eval(), tok
