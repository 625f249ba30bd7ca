"""The verl files memrl ships inside its package (``memrl/resources/verl``), by absolute path.

    python -m memrl.integrations.verl.resources agent_loops.yaml     # prints the installed file's path

verl's workers load ``agent_loop_config_path`` (and ``multi_turn.tool_config_path``) with
``verl.utils.import_utils.resolve_config_path``: an absolute path as it is; a relative one against the
worker's working directory, then against the folder holding the verl package. A path relative to the
repository (what memrl shipped before) therefore breaks on Ray nodes whose workers start elsewhere; the
scripts pass this absolute path, and the configs' default (``memrl/resources/verl/...``, relative to
site-packages) resolves on every node of a regular pip install.

Run as a script it also imports memrl's verl plugin first, so a launch on a machine where the plugin
cannot load (a missing dependency) stops here with the real error instead of verl's DEBUG-level log line
(see :mod:`memrl.integrations.verl.plugin`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from memrl.errors import ConfigError

FILES = ("agent_loops.yaml", "agent_loops_ruler_locomo.yaml", "memupdate_tools.yaml")


def resource(name: str) -> Path:
    """Absolute path of a shipped verl file (one of :data:`FILES`)."""
    if name not in FILES:
        raise ConfigError(f"memrl ships no verl file {name!r}; one of {', '.join(FILES)}")
    path = Path(__file__).resolve().parents[2] / "resources" / "verl" / name
    if not path.is_file():  # pragma: no cover - a broken install
        raise ConfigError(f"{path} is missing: reinstall memrl")
    return path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m memrl.integrations.verl.resources {'|'.join(FILES)}", file=sys.stderr)
        return 2
    import memrl.integrations.verl.plugin  # noqa: F401  (raises what verl would only log at DEBUG)

    print(resource(args[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
