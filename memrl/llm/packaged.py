"""Adapters shipped inside the package: ``memrl/resources/adapters/NAME/`` (an adapter folder, see
:mod:`memrl.llm.adapters`), named ``memrl:NAME`` wherever a local model is taken (``--model memrl:NAME``,
``LocalLLM("memrl:NAME")``). Kept apart from :mod:`memrl.llm.adapters` so that resolving a model name
(:func:`memrl.llm.hf_models.ensure_local_model`) needs neither peft nor that module.
"""

from __future__ import annotations

from pathlib import Path

from memrl.errors import ConfigError

__all__ = [
    "ADAPTER_FILE",
    "ADAPTER_META",
    "PACKAGED",
    "is_adapter_folder",
    "packaged_adapter",
    "packaged_adapters",
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
