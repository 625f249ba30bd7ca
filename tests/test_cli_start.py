"""The CLI's quiet edges: a call imports only its own command's module (``memrl --help`` none, so no torch
and no pydantic), the command list ``memrl --help`` shows is what the modules register, read-only commands
never create a store file, and help is plain text (no reST). Start times are measured by bench/cli_start.py,
not here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memrl.cli.common import plain
from memrl.cli.main import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _modules_after(argv: list[str]) -> set[str]:
    code = (
        "import sys\nfrom memrl.cli.main import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr)"
    )
    r = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=120)
    return set(r.stderr.splitlines()[-1].split())


def test_help_imports_no_command_module():
    mods = _modules_after(["--help"])
    assert not {m for m in mods if m.startswith("memrl.cli.") and m.endswith("_cmd")}
    assert "torch" not in mods and "pydantic" not in mods
    mods = _modules_after(["memory", "list", "--help"])
    assert "memrl.cli.memory_cmd" in mods and "memrl.cli.eval_cmd" not in mods
    assert "torch" not in mods and "pydantic" not in mods


def test_the_command_list_is_what_the_modules_register():
    full = build_parser()
    sub = next(a for a in full._actions if a.dest == "command")
    registered = {c.dest: c.help for c in sub._choices_actions}
    assert registered == {name: help_ for name, (_, help_) in COMMANDS.items()}
    for name in COMMANDS:  # each command's own parser is the full one's
        one = build_parser(name)
        choices = next(a for a in one._actions if a.dest == "command").choices
        assert set(choices) == set(COMMANDS)


@pytest.mark.parametrize("argv", [["list"], ["search", "Lisbon"], ["get", "x"], ["history"], ["export"]])
def test_read_only_commands_never_create_a_store(tmp_path, argv):
    r = subprocess.run([sys.executable, "-m", "memrl.cli.main", "memory", *argv, "--db", "nosuch.db"], cwd=tmp_path,
                       env=ENV, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 1 and "no memory store at nosuch.db" in r.stderr, r.stderr
    assert not (tmp_path / "nosuch.db").exists()


def test_help_is_plain_text():
    assert plain("see :class:`~memrl.eval.qa.QAEvalConfig` and :mod:`memrl.data` (``--mode``)::") == (
        "see QAEvalConfig and memrl.data (--mode):"
    )
    for argv in (
        ["eval", "qa"],
        ["eval", "ruler"],
        ["eval", "retrieval"],
        ["eval", "compare"],
        ["memory", "search"],
    ):
        r = subprocess.run([sys.executable, "-m", "memrl.cli.main", *argv, "--help"], env=ENV, capture_output=True,
                           text=True, timeout=120)  # fmt: skip
        assert r.returncode == 0 and r.stdout
        for mark in ("``", ":class:`", ":mod:`", ":func:`", ":meth:`"):
            assert mark not in r.stdout, (argv, mark)
