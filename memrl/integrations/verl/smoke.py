"""Per-task reward means from verl training logs (what ``scripts/verl_smoke.sh`` prints at the end).

verl's console logger writes one line per step, ``step:N - key:value - ...``
(``verl.utils.logger.aggregate_logger.concat_dict_to_str``); ``critic/score/mean`` is the batch's mean
reward (``verl.trainer.ppo.metric_utils.compute_data_metrics``).

    python -m memrl.integrations.verl.smoke out/read.log out/update.log out/build.log
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from pathlib import Path

KEY = "critic/score/mean"
_STEP = re.compile(r"(?:^|\s)step:(\d+) - ")
_VALUE = re.compile(r"(?:^| - )" + re.escape(KEY) + r":(\S+)")


def reward_means(lines: Iterable[str]) -> dict[int, float]:
    """Step -> mean reward of that step's batch, from verl console log lines."""
    out: dict[int, float] = {}
    for line in lines:
        step, value = _STEP.search(line), _VALUE.search(line)
        if step and value:
            out[int(step.group(1))] = float(value.group(1))
    return out


def summary(name: str, means: dict[int, float]) -> str:
    if not means:
        return f"{name}: no reward lines (verl logged no training step: see {name}'s log)"
    steps = ", ".join(f"step {s}: {v:.3f}" for s, v in sorted(means.items()))
    return f"{name}: mean reward {sum(means.values()) / len(means):.3f} over {len(means)} steps ({steps})"


def main(argv: list[str] | None = None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    for path in paths:
        p = Path(path)
        lines = p.read_text(errors="replace").splitlines() if p.is_file() else []
        print(summary(p.stem, reward_means(lines)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
