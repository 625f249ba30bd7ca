"""Checks before a verl launch, each with a message that says what to do: GPUs visible, the installed versions
against the tested set (``constraints/verl-gpu.txt``), free GPU memory for vLLM's share, enough CPUs for the
Ray actors verl starts, and the attention implementation the installed packages allow.

    python -m memrl.integrations.verl.preflight --config memagent --rollout vllm --gpus 1 [hydra overrides]

prints one line per check (``ok``, ``warn`` or ``FAIL``), then the memory estimate
(:mod:`memrl.integrations.verl.memory_plan`) for the GPUs found, and the override choosing the attention
implementation (``--attn-override`` prints only that override: the scripts pass it to verl). Exit status 1
when a check FAILs (no GPU: verl's rollout cannot start), 0 otherwise. The machine is read through
:class:`Probes` (nvidia-smi or torch, ``importlib.metadata``, ``os.cpu_count``), which tests replace.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

#: the versions verl 0.9.1's own ``vllm``/``sglang`` extras pin (its METADATA), the set the configs target
TESTED = {
    "verl": "0.9.1",
    "vllm": "0.24.0",
    "torch": "2.11.0",
    "transformers": "5.9.0",
    "flash-attn": "2.8.3",
}
CONSTRAINTS = Path(__file__).resolve().parents[3] / "constraints" / "verl-gpu.txt"


@dataclass(frozen=True)
class Gpu:
    name: str
    total_mb: float
    free_mb: float


def nvidia_smi_gpus() -> list[Gpu] | None:
    """GPUs as nvidia-smi lists them; None when nvidia-smi is not installed (no NVIDIA driver)."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,memory.free", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout  # fmt: skip
    except (subprocess.SubprocessError, OSError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        name, total, free = (x.strip() for x in line.rsplit(",", 2))
        gpus.append(Gpu(name, float(total), float(free)))
    return gpus


def torch_gpus() -> list[Gpu]:
    """GPUs as torch sees them (when nvidia-smi is missing but CUDA works, e.g. in some containers)."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    gpus = []
    for i in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(i)
        gpus.append(Gpu(torch.cuda.get_device_name(i), total / 2**20, free / 2**20))
    return gpus


def installed_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def flash_attn_importable() -> bool:
    try:
        import flash_attn  # noqa: F401
    except Exception:  # ImportError, or a wheel built for another torch/CUDA (an OSError/undefined symbol)
        return False
    return True


@dataclass
class Probes:
    """What the checks read of the machine; tests pass fakes."""

    nvidia_smi: Callable[[], list[Gpu] | None] = nvidia_smi_gpus
    torch_gpus: Callable[[], list[Gpu]] = torch_gpus
    version: Callable[[str], str | None] = installed_version
    flash_attn: Callable[[], bool] = flash_attn_importable
    cpu_count: Callable[[], int] = lambda: os.cpu_count() or 1


@dataclass
class Report:
    lines: list[tuple[str, str]] = field(default_factory=list)  # (level, message)
    gpus: list[Gpu] = field(default_factory=list)
    attn: str = "sdpa"

    def add(self, level: str, message: str) -> None:
        self.lines.append((level, message))

    @property
    def failed(self) -> bool:
        return any(level == "FAIL" for level, _ in self.lines)

    def text(self) -> str:
        return "\n".join(f"preflight {level:4} {message}" for level, message in self.lines)


def check_gpus(report: Report, probes: Probes, want: int | None) -> None:
    gpus = probes.nvidia_smi()
    if gpus is None:
        gpus = probes.torch_gpus()
        if not gpus:
            report.add("FAIL", "nvidia-smi not found and torch sees no CUDA device: this machine has no usable "
                       "NVIDIA GPU or driver. verl's rollout (vLLM/SGLang) needs one: run on a GPU machine, or "
                       "install the NVIDIA driver (nvidia-smi comes with it)")  # fmt: skip
            return
        report.add("warn", f"nvidia-smi not found, but torch sees {len(gpus)} GPU(s): set GPUS=N explicitly")
    elif not gpus:
        report.add("FAIL", "nvidia-smi lists no GPU (driver loaded, no device visible): check "
                   "CUDA_VISIBLE_DEVICES and the container's GPU access (docker --gpus all)")  # fmt: skip
        return
    report.gpus = gpus
    if want and want > len(gpus):
        report.add("FAIL", f"{want} GPUs asked for (GPUS/--gpus) but {len(gpus)} visible: lower GPUS")
        return
    report.add("ok", f"{len(gpus)} GPU(s): {gpus[0].name}, {gpus[0].total_mb / 1024:.0f} GiB each")


def check_versions(report: Report, probes: Probes, rollout: str) -> None:
    engines = ("vllm",) if rollout == "vllm" else ("sglang",)
    for dist in ("verl", "torch", "transformers", *engines):
        have = probes.version(dist)
        want = TESTED.get(dist)
        if have is None:
            how = ("pip install -c constraints/verl-gpu.txt 'memrl[verl-gpu]'" if dist != "sglang"
                   else "pip install 'verl[sglang]==0.9.1'")  # fmt: skip
            report.add("FAIL" if dist in ("verl", *engines) else "warn", f"{dist} is not installed: {how}")
        elif want and have.split("+")[0] != want:
            report.add("warn", f"{dist} {have} installed, the tested set has {want} (verl 0.9.1's pins): if the "
                       f"run fails early, reinstall with -c {CONSTRAINTS.name} (docs/verl.md, Install)")  # fmt: skip
        else:
            report.add("ok", f"{dist} {have}")


def check_free_memory(report: Report, utilization: float) -> None:
    """vLLM refuses to start when the free memory is below its share (``gpu_memory_utilization``)."""
    for i, gpu in enumerate(report.gpus):
        need = utilization * gpu.total_mb
        if gpu.free_mb < need:
            report.add("warn", f"GPU {i} has {gpu.free_mb / 1024:.1f} GiB free, vLLM will ask for {need / 1024:.1f} "
                       f"GiB (gpu_memory_utilization={utilization}): stop the other processes on it (nvidia-smi "
                       "shows them) or lower actor_rollout_ref.rollout.gpu_memory_utilization")  # fmt: skip
            return
    if report.gpus:
        report.add("ok", f"free GPU memory covers vLLM's share ({utilization:.0%})")


def cpus_needed(cfg: dict[str, Any], gpus: int) -> int:
    """One CPU per Ray actor verl starts on a node: agent-loop workers, reward workers, TransferQueue's
    storage units and its controller, the task runner, one worker per GPU."""
    agent = cfg["actor_rollout_ref"]["rollout"]["agent"]["num_workers"]
    reward = (cfg.get("reward") or {}).get("num_workers") or 0
    tq = cfg.get("transfer_queue") or {}
    storage = ((tq.get("backend") or {}).get("SimpleStorage") or {}).get("num_data_storage_units", 0) or 0
    return int(agent) + int(reward) + int(storage) + 1 + 1 + gpus


def check_cpus(report: Report, probes: Probes, cfg: dict[str, Any], gpus: int) -> None:
    need, have = cpus_needed(cfg, gpus), probes.cpu_count()
    if have < need:
        report.add("warn", f"{have} CPUs, verl's Ray actors reserve {need} (agent loops, reward workers, "
                   "TransferQueue storage + controller, task runner, GPU workers): Ray waits for CPUs that never "
                   "free and the run hangs at actor creation. Lower them: actor_rollout_ref.rollout.agent."
                   "num_workers=2 reward.num_workers=2 transfer_queue.backend.SimpleStorage.num_data_storage_units=2")  # fmt: skip
    else:
        report.add("ok", f"{have} CPUs for {need} Ray actors")


def check_attention(report: Report, probes: Probes) -> None:
    if probes.flash_attn():
        report.attn = "flash_attention_2"
        report.add("ok", "flash_attn importable: the actor uses flash_attention_2")
    else:
        report.attn = "sdpa"
        report.add("warn", "flash_attn not importable: the actor uses sdpa (PyTorch's attention; slower and more "
                   "memory at long sequences). For flash_attention_2: pip install flash-attn==2.8.3 "
                   "--no-build-isolation (built against the installed torch)")  # fmt: skip


def attn_override(attn: str) -> str:
    """The hydra override that sets the actor's (and ref's) attention (verl reads
    ``model.override_config.attn_implementation``, default flash_attention_2: verl/workers/config/model.py)."""
    return f"+actor_rollout_ref.model.override_config.attn_implementation={attn}"


def preflight(cfg: dict[str, Any], *, rollout: str, gpus: int | None, probes: Probes | None = None) -> Report:
    probes = probes or Probes()
    report = Report()
    check_gpus(report, probes, gpus)
    check_versions(report, probes, rollout)
    check_free_memory(report, float(cfg["actor_rollout_ref"]["rollout"]["gpu_memory_utilization"]))
    check_cpus(report, probes, cfg, gpus or len(report.gpus) or 1)
    check_attention(report, probes)
    return report


def main(argv: list[str] | None = None) -> int:
    import argparse

    from memrl.integrations.verl.memory_plan import compose, launch_report

    ap = argparse.ArgumentParser(prog="python -m memrl.integrations.verl.preflight", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--config", required=True, help="a config of configs/verl")
    ap.add_argument("--rollout", default="vllm", choices=("vllm", "sglang"))
    ap.add_argument(
        "--gpus", type=int, default=None, help="GPUs asked for on this node (default: all visible)"
    )
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--model", default=None, help="model folder, for the memory estimate")
    ap.add_argument("--attn-override", action="store_true", help="print only the attention override")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    if args.attn_override:
        print(attn_override("flash_attention_2" if flash_attn_importable() else "sdpa"))
        return 0
    cfg = compose(args.config, args.overrides)
    report = preflight(cfg, rollout=args.rollout, gpus=args.gpus)
    print(report.text())
    if report.gpus:
        gpus = (args.gpus or len(report.gpus)) * args.nodes
        print("\n".join(launch_report(cfg, args.model or cfg["memrl_memory_plan"]["model"], gpus,
                                      round(report.gpus[0].total_mb * 2**20 / 1e9, 1))))  # fmt: skip
    return 1 if report.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
