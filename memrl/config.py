"""Config dataclasses and their command-line flags, mapped 1:1.

A config is a frozen dataclass whose fields carry their help text (``field(metadata={"help": ...})``,
via :func:`option`). :func:`add_arguments` turns its fields into argparse flags (``top_k`` ->
``--top-k``; ``bool`` -> ``--x/--no-x``; tuples -> lists; ``Literal`` -> choices) and
:func:`from_args` builds the config back from parsed arguments, so there is one place to document a knob.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

C = TypeVar("C")


def option(
    default: Any = dataclasses.MISSING, help: str = "", *, aliases: tuple[str, ...] = (), **kw: Any
) -> Any:
    """A dataclass field with help text (and extra CLI flag aliases)."""
    meta = {"help": help, "aliases": aliases}
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta, **kw)
    return dataclasses.field(default=default, metadata=meta, **kw)


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    if get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def add_arguments(parser: argparse.ArgumentParser, cls: type, *, skip: tuple[str, ...] = ()) -> None:
    """Add one flag per field of dataclass ``cls``."""
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        tp, _ = _unwrap_optional(hints[f.name])
        flags = [f"--{f.name.replace('_', '-')}", *f.metadata.get("aliases", ())]
        default = f.default if f.default is not dataclasses.MISSING else None
        help_text = f.metadata.get("help", "")
        kw: dict[str, Any] = {"dest": f.name, "default": default}
        if tp is bool:
            parser.add_argument(*flags, action=argparse.BooleanOptionalAction, help=help_text, **kw)
            continue
        if default not in (None, (), "") and not isinstance(default, bool):
            help_text += f" (default: {default})"
        origin = get_origin(tp)
        if origin is Literal:
            kw["choices"] = list(get_args(tp))
            kw["type"] = type(get_args(tp)[0])
        elif origin in (tuple, list):
            inner = get_args(tp)[0]
            kw["nargs"] = "+"
            kw["type"] = inner if inner in (int, float) else str
        elif tp in (int, float, str):
            kw["type"] = tp
        parser.add_argument(*flags, help=help_text, **kw)


def from_args(cls: type[C], args: argparse.Namespace, **overrides: Any) -> C:
    """Build ``cls`` from parsed arguments (fields absent from ``args`` keep their defaults)."""
    values = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if hasattr(args, f.name):
            v = getattr(args, f.name)
            values[f.name] = tuple(v) if isinstance(v, list) else v
    values.update(overrides)
    return cls(**values)


def parse_options(cls: type[C], pairs: typing.Iterable[str], **base: Any) -> C:
    """Build ``cls`` from ``KEY=VALUE`` strings (``context=full``, ``views=turn,context``), converting
    each value to its field's type; unknown keys and bad values raise ``ConfigError`` naming them."""
    from memrl.errors import ConfigError

    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values: dict[str, Any] = dict(base)
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in names:
            raise ConfigError(f"{cls.__name__} has no option {key!r} (options: {', '.join(sorted(names))})")
        tp, optional = _unwrap_optional(hints[key])
        try:
            values[key] = _convert(raw.strip(), tp, optional)
        except ValueError as e:
            raise ConfigError(f"option {key}={raw!r}: {e}") from None
    return cls(**values)


def _convert(raw: str, tp: Any, optional: bool) -> Any:
    if optional and raw.lower() in ("none", "null", ""):
        return None
    origin = get_origin(tp)
    if tp is bool:
        if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError("expected true or false")
        return raw.lower() in ("true", "1", "yes")
    if origin is Literal:
        choices = get_args(tp)
        value = type(choices[0])(raw)
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(map(str, choices))}")
        return value
    if origin in (tuple, list):
        inner = get_args(tp)[0]
        return tuple(_convert(p.strip(), inner, False) for p in raw.split(",") if p.strip())
    if tp in (int, float, str):
        return tp(raw)
    raise ValueError(f"cannot set a {tp} from the command line")
