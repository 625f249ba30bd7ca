"""Config dataclasses <-> command-line flags and KEY=VALUE options."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Literal

import pytest

from memrl.config import add_arguments, from_args, option, parse_options
from memrl.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Demo:
    top_k: int = option(10, "how many")
    mode: Literal["a", "b"] = option("a", "which")
    flag: bool = option(False, "a switch")
    names: tuple[str, ...] = option((), "some names", aliases=("--name-list",))
    limit: int | None = option(None, "optional bound")
    ratio: float = option(0.5, "a float")


def test_flags_map_one_to_one():
    p = argparse.ArgumentParser()
    add_arguments(p, Demo)
    args = p.parse_args(["--top-k", "3", "--mode", "b", "--flag", "--name-list", "x", "y", "--limit", "7"])
    cfg = from_args(Demo, args)
    assert cfg == Demo(top_k=3, mode="b", flag=True, names=("x", "y"), limit=7, ratio=0.5)
    assert from_args(Demo, p.parse_args([])) == Demo()
    assert from_args(Demo, p.parse_args(["--no-flag"])).flag is False
    with pytest.raises(SystemExit):
        p.parse_args(["--mode", "c"])
    assert "how many (default: 10)" in p.format_help()


def test_parse_options():
    cfg = parse_options(Demo, ["top_k=4", "mode=b", "flag=true", "names=x,y", "limit=none", "ratio=0.25"])
    assert cfg == Demo(top_k=4, mode="b", flag=True, names=("x", "y"), limit=None, ratio=0.25)
    for bad, msg in [("colour=red", "no option 'colour'"), ("mode=c", "expected one of a, b"),
                     ("flag=maybe", "expected true or false"), ("top_k=many", "top_k='many'"),
                     ("top_k", "no option")]:  # fmt: skip
        with pytest.raises(ConfigError, match=msg):
            parse_options(Demo, [bad])
