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

#: Modules that add a command group: each has ``register(subparsers)``; handlers are ``args.func(args)``.
COMMAND_MODULES = (
    "memrl.cli.memory_cmd",
    "memrl.cli.agents_cmd",
    "memrl.cli.data_cmd",
    "memrl.cli.serve_cmd",
    "memrl.cli.demo_cmd",
    "memrl.cli.eval_cmd",
    "memrl.cli.train_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memrl", description="LLM long-term memory agents trained with RL")
    parser.add_argument("--version", action="version", version=f"memrl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["eval"] and len(argv) > 1 and argv[1].startswith("--") and argv[1] != "--help":
        argv.insert(1, "qa")  # `memrl eval --dataset X` is the QA evaluation
    from memrl.cli.serve_cmd import legacy_argv

    argv = legacy_argv(argv)  # `memrl serve --provider local` is `memrl serve llm --provider local`
    parser = build_parser()
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
