"""The ``memrl`` command line. Each command group lives in its own module and registers itself here.

memrl memory add "Alice lives in Lisbon" --db mem.db --namespace alice
memrl memory search "where does Alice live" --db mem.db --namespace alice --json
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from memrl import __version__
from memrl.errors import MemrlError, ValidationError

#: Each command, its module (``register(subparsers)``; handlers are ``args.func(args)``) and its one-line
#: help, in the order ``memrl --help`` lists them. A call imports only its own command's module (``memrl --help`` none): the others pull in torch, pydantic models, the
#: evaluation configs, seconds of imports every call would pay (bench/cli_start.py measures it).
#: tests/test_cli_start.py checks these lines against what the modules register.
COMMANDS: dict[str, tuple[str, str]] = {
    "memory": ("memrl.cli.memory_cmd", "inspect and edit a memory store"),
    "build": ("memrl.cli.agents_cmd", "build memory for a conversation, session by session"),
    "update": ("memrl.cli.agents_cmd", "let the MemUpdate agent edit a namespace with its six tools"),
    "read": ("memrl.cli.agents_cmd", "MemAgent: read a long document chunk by chunk, then answer"),
    "data": ("memrl.cli.data_cmd", "benchmark data: download, inspect"),
    "serve": ("memrl.cli.serve_cmd", "run a server: llm (default), memory, mcp or reward"),
    "ui": ("memrl.cli.serve_cmd", "open the web memory browser on a store file"),
    "demo": (
        "memrl.cli.demo_cmd",
        "build memory for the bundled conversation with the offline model, answer, score",
    ),
    "eval": ("memrl.cli.eval_cmd", "evaluate memory: QA (default) or retrieval (no LLM)"),
    "train": ("memrl.cli.train_cmd", "train an agent with RL on this machine (local model)"),
    "setup": ("memrl.cli.setup_cmd", "install optional parts: the offline models"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``memrl`` parser: every command's (``command`` None), or only ``command``'s, the others listed by
    name and help (so ``memrl --help`` and a mistyped command import no command module)."""
    parser = argparse.ArgumentParser(prog="memrl", description="LLM long-term memory agents trained with RL")
    parser.add_argument("--version", action="version", version=f"memrl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    wanted = None if command is None else COMMANDS.get(command, ("", ""))[0]
    loaded: set[str] = set()
    for name, (module, help_) in COMMANDS.items():
        if wanted is None or module == wanted:
            if module not in loaded:
                importlib.import_module(module).register(sub)
                loaded.add(module)
        else:
            sub.add_parser(name, help=help_)
    return parser


def _command(argv: Sequence[str]) -> str:
    """The command ``argv`` names ("" when none: ``memrl --help``)."""
    return next((a for a in argv if not a.startswith("-")), "")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["eval"] and len(argv) > 1 and argv[1].startswith("--") and argv[1] != "--help":
        argv.insert(1, "qa")  # `memrl eval --dataset X` is the QA evaluation
    if argv[:1] == ["serve"]:
        from memrl.cli.serve_cmd import legacy_argv

        argv = legacy_argv(argv)  # `memrl serve --provider local` is `memrl serve llm --provider local`
    parser = build_parser(_command(argv))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ValidationError as e:
        print(f"memrl: error: {e}", file=sys.stderr)
        return 2
    except MemrlError as e:
        print(f"memrl: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # a path the user gave cannot be read or written (permissions, full disk, ...)
        where = f": {e.filename}" if e.filename else ""
        print(f"memrl: error: {e.strerror or e}{where} (check the paths given)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("memrl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
