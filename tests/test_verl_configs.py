"""Every verl setting memrl ships (configs/verl/*.yaml and the overrides of scripts/verl_*.sh) goes
through verl's own Hydra composition and ``validate_config``, at one GPU and at 2 nodes x 8 GPUs.

The scripts run unchanged; a ``python`` shim first on PATH sends ``python -m verl.trainer.main_ppo ...``
to tests/verl_dry_run.py, which runs verl's real ``main_ppo.main`` up to the point where it would start
Ray and the GPU workers, and records the resolved config. Everything else (``memrl data prepare`` in the
smoke script) runs for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

ROOT = Path(__file__).resolve().parents[1]
TASKS = {"read": "memagent", "update": "memupdate", "build": "membuilder"}


@pytest.fixture
def run_script(tmp_path):
    """Run a script of scripts/ with the dry-run shim; returns (completed process, recorded configs)."""
    shim = tmp_path / "bin"
    shim.mkdir()
    real = sys.executable
    (shim / "python").write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "-m" ] && [ "$2" = "verl.trainer.main_ppo" ]; then\n'
        f'  shift 2; exec "{real}" "{ROOT / "tests" / "verl_dry_run.py"}" "$@"\nfi\n'
        f'exec "{real}" "$@"\n'
    )
    (shim / "python").chmod(0o755)
    record = tmp_path / "configs.jsonl"

    def run(
        *args: str, env: dict[str, str] | None = None, rc: int = 0
    ) -> tuple[subprocess.CompletedProcess, list[dict]]:
        # no GPU, no vLLM here: the preflight checks are tested on their own (test_verl_smoke.py) and below
        # PYTHONPATH: the scripts' `python -m memrl...` use this checkout's package, not another installed one
        full_env = {"MEMRL_SKIP_PREFLIGHT": "1", **os.environ, **(env or {}), "MEMRL_VERL_DRY_RUN": str(record),
                    "PYTHONPATH": str(ROOT),
                    "PATH": f"{shim}:{Path(real).parent}:{os.environ['PATH']}"}  # fmt: skip
        proc = subprocess.run(["bash", *args], cwd=tmp_path, env=full_env, capture_output=True, text=True,
                              timeout=900)  # fmt: skip
        assert proc.returncode == rc, (
            f"{args[0]} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
        )
        configs = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
        record.unlink(missing_ok=True)
        return proc, configs

    return run


def check_loop_config(cfg: dict) -> None:
    """The agent-loop file verl's workers load is an absolute path to memrl's shipped file (a relative
    path resolves against each Ray worker's own working directory)."""
    path = cfg["actor_rollout_ref"]["rollout"]["agent"]["agent_loop_config_path"]
    assert os.path.isabs(path) and Path(path).is_file(), path


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(TASKS))
def test_one_node_script_passes_verls_validation_at_one_gpu(run_script, tmp_path, task):
    train, val = tmp_path / "train.parquet", tmp_path / "val.parquet"
    _, configs = run_script(str(ROOT / "scripts/verl_train.sh"), task, "/models/Qwen2.5-0.5B-Instruct",
                            str(train), str(val), f"hydra.run.dir={tmp_path}/hydra",
                            env={"GPUS": "1"})  # fmt: skip
    (cfg,) = configs
    assert cfg["trainer"]["n_gpus_per_node"] == 1 and cfg["trainer"]["nnodes"] == 1
    assert cfg["data"]["train_files"] == str(train) and cfg["data"]["val_files"] == str(val)
    assert cfg["actor_rollout_ref"]["rollout"]["agent"]["default_agent_loop"] == TASKS[task]
    check_loop_config(cfg)


@pytest.mark.slow
def test_no_validation_file_means_no_validation_not_the_training_file(run_script, tmp_path):
    train = tmp_path / "train.parquet"
    _, (cfg,) = run_script(str(ROOT / "scripts/verl_train.sh"), "read", "/models/m", str(train), "none",
                           f"hydra.run.dir={tmp_path}/hydra", env={"GPUS": "1"})  # fmt: skip
    assert cfg["trainer"]["test_freq"] == -1 and cfg["trainer"]["val_before_train"] is False


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(TASKS))
def test_cluster_script_passes_verls_validation_at_two_nodes_of_eight_gpus(run_script, tmp_path, task):
    train, val = tmp_path / "train.parquet", tmp_path / "val.parquet"
    _, configs = run_script(str(ROOT / "scripts/verl_cluster.sh"), "submit", task, "/models/Qwen2.5-7B-Instruct",
                            str(train), str(val), f"hydra.run.dir={tmp_path}/hydra",
                            env={"NNODES": "2", "GPUS_PER_NODE": "8", "RAY_ADDRESS": "127.0.0.1:1"})  # fmt: skip
    (cfg,) = configs
    assert cfg["trainer"]["n_gpus_per_node"] == 8 and cfg["trainer"]["nnodes"] == 2
    check_loop_config(cfg)


@pytest.mark.slow
def test_smoke_script_prepares_rows_and_passes_verls_validation_for_every_task(run_script, tmp_path):
    proc, configs = run_script(str(ROOT / "scripts/verl_smoke.sh"), "/models/Qwen2.5-0.5B-Instruct",
                               env={"MEMRL_SMOKE_DIR": str(tmp_path / "smoke"),
                                    "MEMRL_SMOKE_OVERRIDES": f"hydra.run.dir={tmp_path}/hydra"}, rc=1)  # fmt: skip
    assert [c["actor_rollout_ref"]["rollout"]["agent"]["default_agent_loop"] for c in configs] == [
        "memagent", "memupdate", "membuilder"
    ]  # fmt: skip
    for cfg in configs:
        assert cfg["trainer"]["n_gpus_per_node"] == 1
        assert cfg["actor_rollout_ref"]["model"]["path"] == "/models/Qwen2.5-0.5B-Instruct"
        assert Path(cfg["data"]["train_files"]).is_file()  # the rows the script prepared
        check_loop_config(cfg)
        assert cfg["trainer"]["rollout_data_dir"].endswith("/rollouts-" + {"memagent": "read", "memupdate": "update",
                                                                          "membuilder": "build"}[cfg["actor_rollout_ref"]["rollout"]["agent"]["default_agent_loop"]])  # fmt: skip
        assert (
            cfg["actor_rollout_ref"]["model"]["override_config"]["attn_implementation"] == "sdpa"
        )  # no flash_attn here
    # nothing trained in a dry run: every task ran, the summary says each failed, and the script exits 1
    for task in ("read", "update", "build"):
        assert f"{task}: FAILED | steps 0/3" in proc.stdout
    assert "FAILED: read, update, build" in proc.stdout


@pytest.mark.slow
def test_read_recipe_on_ruler_locomo_launches_with_its_own_loop_options(run_script, tmp_path):
    """docs/training.md's recipe: CONFIG picks the recipe's config, LOOPS picks the shipped RULER-LoCoMo loop file (chunks of 1,024 tokens, a
    256-token memory); without LOOPS the scripts would pass agent_loops.yaml and its 5,000-token chunks."""
    from omegaconf import OmegaConf

    train, val = tmp_path / "train.parquet", tmp_path / "val.parquet"
    _, (cfg,) = run_script(str(ROOT / "scripts/verl_train.sh"), "read", "/models/Qwen2.5-3B-Instruct", str(train),
                           str(val), f"hydra.run.dir={tmp_path}/hydra",
                           env={"GPUS": "1", "CONFIG": "memagent_ruler_locomo",
                                "LOOPS": "agent_loops_ruler_locomo.yaml"})  # fmt: skip
    check_loop_config(cfg)
    assert cfg["actor_rollout_ref"]["rollout"]["n"] == 16 and cfg["trainer"]["total_epochs"] == 5
    (loop,) = OmegaConf.load(cfg["actor_rollout_ref"]["rollout"]["agent"]["agent_loop_config_path"])
    assert loop.name == "memagent" and loop.chunk_tokens == 1024 and loop.memory_tokens == 256


def test_scripts_refuse_a_loop_file_memrl_does_not_ship(tmp_path):
    proc = subprocess.run(["bash", "-c", f'set -euo pipefail; . "{ROOT}/scripts/verl_common.sh"; LOOPS=nope.yaml; '
                           f'memrl_verl_args "{tmp_path}/t.parquet" none'],
                          env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode != 0 and "memrl ships no verl file 'nope.yaml'" in proc.stderr


def test_train_script_says_when_nvidia_smi_is_missing(tmp_path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    env.pop("GPUS", None)
    proc = subprocess.run(["bash", str(ROOT / "scripts/verl_train.sh"), "read", "/models/m", str(tmp_path / "t.parquet"),
                           "none"], env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 2 and "nvidia-smi not found: no NVIDIA driver on this machine" in proc.stderr


@pytest.mark.slow
def test_train_script_runs_the_preflight_and_stops_on_a_fail(run_script, tmp_path):
    """A fake nvidia-smi (one H100) at the boundary; vLLM is not installed here, which preflight FAILs."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.write_text('#!/bin/sh\nif [ "$1" = -L ]; then echo "GPU 0: NVIDIA H100 80GB HBM3"; '
                   'else echo "NVIDIA H100 80GB HBM3, 81559, 80000"; fi\n')  # fmt: skip
    smi.chmod(0o755)
    proc, configs = run_script(str(ROOT / "scripts/verl_train.sh"), "update", "/models/Qwen2.5-7B-Instruct",
                               str(tmp_path / "t.parquet"), "none", env={"MEMRL_SKIP_PREFLIGHT": "0"}, rc=1)  # fmt: skip
    assert configs == []  # verl never started
    assert "preflight ok   1 GPU(s): NVIDIA H100 80GB HBM3" in proc.stdout
    assert "preflight FAIL vllm is not installed" in proc.stdout
    assert "memory estimate: Qwen2.5-7B-Instruct on 1 GPU(s) of 85.5 GB" in proc.stdout  # 7B on one GPU
    assert "DOES NOT FIT" in proc.stdout and "preflight failed" in proc.stderr
