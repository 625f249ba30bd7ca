"""The smoke run's per-task summary (memrl.integrations.verl.smoke) on run folders written here: a task that
trained, a task whose launch crashed, a task that logged fewer steps than asked; and the preflight checks
(memrl.integrations.verl.preflight) with the machine's probes faked (nvidia-smi, versions, CPUs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memrl.integrations.verl.preflight import TESTED, Gpu, Probes, attn_override, cpus_needed, preflight
from memrl.integrations.verl.smoke import group_variance, main, read_task


def step_line(step: int, mean: float) -> str:
    """A line as verl's console logger writes it (concat_dict_to_str; checked against verl below)."""
    return f"step:{step} - actor/pg_loss:0.1 - critic/score/mean:{mean}"


def dump(folder: Path, step: int, rows: list[tuple[str, float]]) -> None:
    """verl's rollout dump (trainer.rollout_data_dir/STEP.jsonl), one line per output."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{step}.jsonl", "w") as f:
        for uid, score in rows:
            f.write(
                json.dumps(
                    {"input": "q", "output": "a", "gts": None, "score": score, "step": step, "uid": uid}
                )
                + "\n"
            )


def write_task(out: Path, name: str, *, rc: int, steps: dict[int, float], log: list[str] = ()) -> None:
    lines = ["(TaskRunner pid=1) starting", *log, *(step_line(s, m) for s, m in steps.items())]
    (out / f"{name}.log").write_text("\n".join(lines) + "\n")
    (out / f"{name}.rc").write_text(f"{rc}\n")


def test_group_variance_uses_each_rollouts_last_output():
    # prompt p0: rollout 0 has two outputs (MemAgent's chunk call, then the answer scored 1), rollout 1 scores 0
    rows = [{"uid": "p0_0_0", "score": 0.0, "step": 1}, {"uid": "p0_0_1", "score": 1.0, "step": 1},
            {"uid": "p0_1_0", "score": 0.0, "step": 1},
            {"uid": "p1_0_0", "score": 0.0, "step": 1}, {"uid": "p1_1_0", "score": 0.0, "step": 1}]  # fmt: skip
    assert group_variance(rows) == (2, 1)


def test_summary_reports_every_task_and_fails_at_the_end_if_one_failed(tmp_path, capsys):
    write_task(tmp_path, "read", rc=0, steps={1: 0.0, 2: 0.5, 3: 0.25},
               log=["(AgentLoopWorkerTQ pid=7) ERROR Error in _run_prompt for uid=p3: RolloutFailed: memagent "
                    "episode 3 failed: ValidationError: prompt (9000 tokens) + max_tokens (1024) exceeds the "
                    "model's context of 8192 tokens"])  # fmt: skip
    dump(tmp_path / "rollouts-read", 1, [("p0_0_0", 0.0), ("p0_1_0", 1.0), ("p1_0_0", 0.0), ("p1_1_0", 0.0)])
    write_task(tmp_path, "update", rc=1, steps={},
               log=["Traceback (most recent call last):", "ValueError: max_model_len (40960) should be less than "
                    "or equal to max_position_embeddings (32768)"])  # fmt: skip
    write_task(tmp_path, "build", rc=0, steps={1: 0.3})
    assert main([str(tmp_path), "read", "update", "build", "--steps", "3"]) == 1
    out = capsys.readouterr().out
    read, update, build = (
        next(x for x in out.splitlines() if x.startswith(f"{t}:")) for t in ("read", "update", "build")
    )
    assert read.startswith("read: ok | steps 3/3 | mean reward 0.250 (0.000, 0.500, 0.250)")
    assert "groups with variance 1/2" in read and "failed rollouts 1" in read
    assert update.startswith("update: FAILED | steps 0/3") and "exit 1" in update
    assert "no training step logged; last error: ValueError: max_model_len (40960)" in out
    assert build.startswith("build: FAILED | steps 1/3") and "1 of 3 steps logged" in out
    assert "FAILED: update, build" in out


def test_summary_of_a_run_that_never_started_a_task(tmp_path, capsys):
    assert main([str(tmp_path), "read"]) == 1
    run = read_task(tmp_path, "read")
    assert run.rc is None and run.means == {} and "exit unknown" in run.line(1)


def test_all_tasks_ok_exits_zero(tmp_path, capsys):
    for t in ("read", "update"):
        write_task(tmp_path, t, rc=0, steps={1: 0.0})
    assert main([str(tmp_path), "read", "update", "--steps", "1"]) == 0
    assert "all tasks ran" in capsys.readouterr().out


def test_step_lines_and_the_dump_are_verls_own_formats(tmp_path):
    pytest.importorskip("verl")
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.utils.logger.aggregate_logger import concat_dict_to_str

    assert concat_dict_to_str({"actor/pg_loss": 0.1, "critic/score/mean": 0.5}, step=2) == step_line(2, 0.5)
    PPOTrainer._write_generations(["q"] * 3, ["a"] * 3, [None] * 3, [1.0, 0.0, 0.0],
                                  {"uid": ["p0_0_0", "p0_1_0", "p1_0_0"]}, str(tmp_path / "rollouts-read"), 1)  # fmt: skip
    (tmp_path / "read.log").write_text(concat_dict_to_str({"critic/score/mean": 0.5}, step=1) + "\n")
    (tmp_path / "read.rc").write_text("0")
    run = read_task(tmp_path, "read")
    assert (run.means, run.groups, run.varied, run.failed(1)) == ({1: 0.5}, 2, 1, False)


# --- preflight ------------------------------------------------------------------------------------------


def config(agent=8, reward=8, storage=8, util=0.5) -> dict:
    return {"actor_rollout_ref": {"rollout": {"agent": {"num_workers": agent}, "gpu_memory_utilization": util}},
            "reward": {"num_workers": reward},
            "transfer_queue": {"backend": {"SimpleStorage": {"num_data_storage_units": storage}}}}  # fmt: skip


H100 = Gpu("NVIDIA H100 80GB HBM3", 81559, 80000)


def probes(**kw) -> Probes:
    versions = {"verl": "0.9.1", "vllm": "0.24.0", "torch": "2.11.0+cu130", "transformers": "5.9.0"}
    base = dict(nvidia_smi=lambda: [H100], torch_gpus=lambda: [], version=versions.get, flash_attn=lambda: True,
                cpu_count=lambda: 64)  # fmt: skip
    return Probes(**{**base, **kw})


def messages(report, level: str) -> str:
    return "\n".join(m for lv, m in report.lines if lv == level)


def test_a_ready_machine_passes():
    r = preflight(config(), rollout="vllm", gpus=1, probes=probes())
    assert not r.failed and messages(r, "warn") == "" and r.attn == "flash_attention_2"
    assert "torch 2.11.0+cu130" in messages(r, "ok")  # a local version tag is the tested version


def test_no_nvidia_smi_and_no_cuda_says_what_to_do():
    r = preflight(config(), rollout="vllm", gpus=None, probes=probes(nvidia_smi=lambda: None))
    assert r.failed and "nvidia-smi not found and torch sees no CUDA device" in messages(r, "FAIL")
    assert "install the NVIDIA driver" in messages(r, "FAIL")


def test_nvidia_smi_missing_but_torch_sees_the_gpu_is_a_warning():
    r = preflight(
        config(), rollout="vllm", gpus=None, probes=probes(nvidia_smi=lambda: None, torch_gpus=lambda: [H100])
    )
    assert not r.failed and "set GPUS=N" in messages(r, "warn")


def test_more_gpus_asked_than_visible():
    r = preflight(config(), rollout="vllm", gpus=8, probes=probes())
    assert r.failed and "8 GPUs asked for" in messages(r, "FAIL")


def test_versions_off_the_tested_set_and_a_missing_engine():
    r = preflight(config(), rollout="vllm", gpus=1,
                  probes=probes(version={"verl": "0.9.1", "torch": "2.13.0", "transformers": "5.10.4"}.get))  # fmt: skip
    assert "torch 2.13.0 installed, the tested set has 2.11.0" in messages(r, "warn")
    assert r.failed and "vllm is not installed: pip install -c constraints/verl-gpu.txt" in messages(
        r, "FAIL"
    )
    assert TESTED["vllm"] == "0.24.0"


def test_busy_gpu_memory():
    r = preflight(
        config(util=0.5),
        rollout="vllm",
        gpus=1,
        probes=probes(nvidia_smi=lambda: [Gpu("H100", 81559, 20000)]),
    )
    assert "GPU 0 has 19.5 GiB free, vLLM will ask for 39.8 GiB" in messages(r, "warn")
    assert "lower actor_rollout_ref.rollout.gpu_memory_utilization" in messages(r, "warn")


def test_too_few_cpus_for_rays_actors_names_the_overrides():
    assert cpus_needed(config(), 1) == 8 + 8 + 8 + 1 + 1 + 1
    r = preflight(config(), rollout="vllm", gpus=1, probes=probes(cpu_count=lambda: 8))
    warn = messages(r, "warn")
    assert "8 CPUs, verl's Ray actors reserve 27" in warn and "hangs at actor creation" in warn
    assert "actor_rollout_ref.rollout.agent.num_workers=2" in warn
    assert not preflight(config(2, 2, 2), rollout="vllm", gpus=1, probes=probes(cpu_count=lambda: 8)).failed


def test_attention_follows_what_is_installed():
    r = preflight(config(), rollout="vllm", gpus=1, probes=probes(flash_attn=lambda: False))
    assert r.attn == "sdpa" and "pip install flash-attn==2.8.3" in messages(r, "warn")
    assert attn_override("sdpa") == "+actor_rollout_ref.model.override_config.attn_implementation=sdpa"
