"""``python -m verl.trainer.main_ppo ARGS`` as memrl's scripts run it, stopped at the GPU boundary.

verl's own ``main_ppo.main`` parses the command line with Hydra (``--config-path``, ``--config-name``,
overrides), runs ``auto_set_device`` and ``validate_config`` exactly as on a GPU machine; only ``run_ppo``
(which starts Ray and the GPU workers) is replaced by a recorder that resolves the config as verl's task
runner does (``OmegaConf.resolve``) and appends it as one JSON line to ``$MEMRL_VERL_DRY_RUN``. Used by
tests/test_verl_configs.py through a ``python`` shim on PATH, so the scripts run unchanged.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    from omegaconf import OmegaConf
    from verl.trainer import main_ppo

    def record(config, task_runner_class) -> None:  # stands in for Ray + GPUs
        OmegaConf.resolve(config)
        with open(os.environ["MEMRL_VERL_DRY_RUN"], "a") as f:
            f.write(json.dumps(OmegaConf.to_container(config)) + "\n")

    main_ppo.run_ppo = record
    sys.argv = ["verl.trainer.main_ppo", *sys.argv[1:]]
    main_ppo.main()


if __name__ == "__main__":
    main()
