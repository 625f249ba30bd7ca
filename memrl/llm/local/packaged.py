"""Adapters shipped inside the package: ``memrl/resources/adapters/NAME/`` (an adapter folder, see
:mod:`memrl.llm.local.adapters`), named ``memrl:NAME`` wherever a local model is taken (``--model memrl:NAME``,
``LocalLLM("memrl:NAME")``). Kept apart from :mod:`memrl.llm.local.adapters` so that resolving a model name
(:func:`memrl.llm.local.hf_models.ensure_local_model`) needs neither peft nor that module.
"""

from __future__ import annotations

import json
from pathlib import Path

from memrl.errors import ConfigError

__all__ = [
    "ADAPTER_FILE",
    "ADAPTER_META",
    "PACKAGED",
    "is_adapter_folder",
    "packaged_adapter",
    "packaged_adapters",
    "trained_options",
]

ADAPTER_FILE = "adapter.safetensors"
ADAPTER_META = "adapter.json"
#: How a model argument names an adapter shipped inside the package: ``memrl:NAME`` (``--model memrl:NAME``).
PACKAGED = "memrl:"


def _packaged_root() -> Path:
    from importlib.resources import files

    return Path(str(files("memrl") / "resources" / "adapters"))


def packaged_adapters() -> list[str]:
    """The names of the adapters shipped in the package (``memrl/resources/adapters/NAME/``)."""
    root = _packaged_root()
    return sorted(p.name for p in root.iterdir() if is_adapter_folder(p)) if root.is_dir() else []


def packaged_adapter(name: str) -> Path:
    """The folder of the shipped adapter ``name`` (``memrl:NAME`` accepted); a ConfigError naming the
    shipped ones when there is none by that name."""
    name = name.removeprefix(PACKAGED)
    folder = _packaged_root() / name
    if not name or "/" in name or not is_adapter_folder(folder):
        shipped = ", ".join(PACKAGED + n for n in packaged_adapters()) or "none"
        raise ConfigError(f"no adapter {PACKAGED}{name} ships with memrl (shipped: {shipped})")
    return folder


def is_adapter_folder(path: str | Path) -> bool:
    p = Path(path)
    return (p / ADAPTER_META).is_file() and (p / ADAPTER_FILE).is_file() and not (p / "config.json").is_file()


def _adapter_folder(spec: str) -> Path | None:
    if spec.startswith(PACKAGED):
        try:
            return packaged_adapter(spec)
        except ConfigError:
            return None
    folder = Path(spec).expanduser()
    return folder if is_adapter_folder(folder) else None


def trained_options(spec: str | None, *, _depth: int = 0) -> list[str]:
    """The agent options (``KEY=VALUE``) the adapter ``spec`` names was trained with: its adapter.json's
    ``agent_options``, or its base adapter's when it records none (an adapter trained on top of another);
    ``[]`` for anything that is not an adapter. A builder loading the adapter takes them as defaults, so it
    asks the prompts and schemas the adapter learned on."""
    folder = _adapter_folder(spec) if spec else None
    if folder is None or _depth > 4:
        return []
    path = folder / ADAPTER_META
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: not readable as JSON ({e})") from e
    options = meta.get("agent_options") if isinstance(meta, dict) else None
    if options is None:
        base = meta.get("base_model") if isinstance(meta, dict) else None
        return trained_options(base, _depth=_depth + 1) if isinstance(base, str) else []
    if not isinstance(options, list) or not all(isinstance(o, str) and "=" in o for o in options):
        raise ConfigError(f"{path}: agent_options must be a list of KEY=VALUE strings, got {options!r}")
    return list(options)
