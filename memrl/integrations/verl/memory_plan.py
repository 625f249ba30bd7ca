"""GPU memory estimate of a verl config: does the plan a config states (model, GPUs, GPU memory) hold?

verl colocates the rollout engine and the FSDP actor on the same GPUs and runs them one after the other, so
the peak is the larger of two phases (per GPU, FSDP shards over all ``gpus``):

* **rollout**: vLLM takes ``gpu_memory_utilization`` x the GPU (its weights copy + KV cache); the actor
  stays resident unless ``param_offload`` / ``optimizer_offload`` move it to CPU between phases
  (``verl/workers/engine/fsdp/transformer_impl.py``: actor offload is per phase, not FSDP's CPUOffload).
* **training** (vLLM's cache freed, ``rollout.free_cache_engine``): the actor's fp32 master weights (4 B),
  fp32 grads (4 B) and AdamW's two fp32 moments (8 B) per parameter, all on the GPU during the update; the
  largest of the update (logits + their gradient), old-log-prob and ref-log-prob micro-batches, whose logits
  are ``tokens x vocab x 4 B`` (fp32 log-softmax); bf16 activations at each layer boundary (gradient
  checkpointing). The reference model is forced to FSDP's CPU offload by verl (``forward_only``), so only one
  layer of it is on the GPU at a time. Tokens per micro-batch: ``*_max_token_len_per_gpu`` with dynamic batch
  size, else ``micro_batch x (prompt_length + response_length)``.

It is an estimate (no allocator fragmentation, no CUDA context, ~2 GB, counted in ``HEADROOM``), meant to
catch plans off by a factor, as the fp32 logits of a 24k-token MemUpdate micro-batch of 2 (29 GB) were.

    python -m memrl.integrations.verl.memory_plan        # the table of every shipped config (docs/verl.md)
    python -m memrl.integrations.verl.memory_plan --config memupdate --model MODEL_DIR --gpus 1 --gpu-gb 80 \\
        [hydra overrides]                                # one launch (what scripts/verl_train.sh prints)
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GB = 1e9
#: what the estimate leaves free on every GPU (CUDA context, NCCL buffers, fragmentation)
HEADROOM = 0.9


@dataclass(frozen=True)
class ModelSpec:
    """What the estimate needs of a model (from its ``config.json``, or :data:`MODELS`)."""

    name: str
    params: float  # number of parameters
    layers: int
    hidden: int
    vocab: int


#: Qwen2.5 Instruct (the models the docs and MemAgent use), from their config.json and safetensors index
MODELS = {
    "Qwen2.5-0.5B-Instruct": ModelSpec("Qwen2.5-0.5B-Instruct", 0.494e9, 24, 896, 151936),
    "Qwen2.5-1.5B-Instruct": ModelSpec("Qwen2.5-1.5B-Instruct", 1.544e9, 28, 1536, 151936),
    "Qwen2.5-3B-Instruct": ModelSpec("Qwen2.5-3B-Instruct", 3.086e9, 36, 2048, 151936),
    "Qwen2.5-7B-Instruct": ModelSpec("Qwen2.5-7B-Instruct", 7.616e9, 28, 3584, 152064),
    "Qwen2.5-14B-Instruct": ModelSpec("Qwen2.5-14B-Instruct", 14.77e9, 48, 5120, 152064),
}


def model_spec(path_or_name: str) -> ModelSpec:
    """A model's spec: a name of :data:`MODELS`, or a folder with a Hugging Face ``config.json`` (parameters
    from the safetensors index's byte count at 2 bytes each, else from the layer shapes)."""
    name = Path(path_or_name).name
    folder = Path(path_or_name)
    if not (folder / "config.json").is_file():
        if name in MODELS:
            return MODELS[name]
        raise FileNotFoundError(f"{path_or_name}: no config.json and not one of {', '.join(MODELS)}")
    cfg = json.loads((folder / "config.json").read_text())
    cfg = cfg.get("text_config", cfg)
    layers, hidden, vocab = int(cfg["num_hidden_layers"]), int(cfg["hidden_size"]), int(cfg["vocab_size"])
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        params = json.loads(index.read_text())["metadata"]["total_size"] / 2
    else:  # attention + MLP per layer, embeddings (tied or not)
        inter = int(cfg.get("intermediate_size", 4 * hidden))
        tied = bool(cfg.get("tie_word_embeddings", False))
        params = layers * (4 * hidden * hidden + 3 * hidden * inter) + vocab * hidden * (1 if tied else 2)
    return ModelSpec(name, float(params), layers, hidden, vocab)


def _get(cfg: dict[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for key in dotted.split("."):
        node = node[key]
    return node


def micro_tokens(cfg: dict[str, Any], phase: str) -> int:
    """Tokens in one micro-batch of ``phase`` (``actor`` update, ``rollout`` old log-probs, ``ref``)."""
    arr = cfg["actor_rollout_ref"]
    seq = int(arr["rollout"]["prompt_length"]) + int(arr["rollout"]["response_length"])
    if phase == "actor":
        if arr["actor"]["use_dynamic_bsz"]:
            return int(arr["actor"]["ppo_max_token_len_per_gpu"])
        return int(arr["actor"]["ppo_micro_batch_size_per_gpu"]) * seq
    section = arr[phase]
    if section["log_prob_use_dynamic_bsz"]:
        return int(section["log_prob_max_token_len_per_gpu"])
    return int(section["log_prob_micro_batch_size_per_gpu"]) * seq


@dataclass(frozen=True)
class Estimate:
    """Per-GPU bytes of each part; ``peak`` is the larger phase."""

    model: ModelSpec
    gpus: int
    gpu_gb: float
    weights: float
    grads: float
    optimizer: float
    logits: float
    activations: float
    vllm: float
    resident_in_rollout: float

    @property
    def training(self) -> float:
        return self.weights + self.grads + self.optimizer + self.logits + self.activations

    @property
    def rollout(self) -> float:
        return self.vllm + self.resident_in_rollout

    @property
    def peak(self) -> float:
        return max(self.training, self.rollout)

    @property
    def fits(self) -> bool:
        return self.peak <= HEADROOM * self.gpu_gb * GB

    def line(self) -> str:
        g = lambda x: f"{x / GB:.1f}"  # noqa: E731
        verdict = "fits" if self.fits else f"DOES NOT FIT ({HEADROOM:.0%} of the GPU usable)"
        return (f"{self.model.name} on {self.gpus} GPU(s) of {self.gpu_gb:g} GB: peak {g(self.peak)} GB per GPU, "
                f"{verdict} [training {g(self.training)}: weights {g(self.weights)} + grads {g(self.grads)} + "
                f"AdamW {g(self.optimizer)} + logits {g(self.logits)} + activations {g(self.activations)}; "
                f"rollout {g(self.rollout)}: vLLM {g(self.vllm)} + actor resident "
                f"{g(self.resident_in_rollout)}]")  # fmt: skip


def estimate(cfg: dict[str, Any], model: ModelSpec, *, gpus: int, gpu_gb: float) -> Estimate:
    """The per-GPU memory of a composed verl config (a plain dict) for ``model`` on ``gpus`` GPUs."""
    arr = cfg["actor_rollout_ref"]
    fsdp = arr["actor"]["fsdp_config"]
    p = model.params / gpus
    weights, grads, optimizer = 4 * p, 4 * p, 8 * p  # fp32 master weights (model_dtype fp32), grads, AdamW
    if str(fsdp.get("model_dtype", "fp32")) in ("bf16", "bfloat16"):
        weights, grads, optimizer = 2 * p, 2 * p, 4 * p
    # logits in fp32: the update keeps them and their gradient; log-prob passes only keep them
    logits = max(2 * micro_tokens(cfg, "actor"), micro_tokens(cfg, "rollout"), micro_tokens(cfg, "ref"))
    logits *= model.vocab * 4
    # gradient checkpointing: one bf16 hidden state per layer and token, plus one layer recomputed (~16x)
    activations = micro_tokens(cfg, "actor") * model.hidden * 2 * (model.layers + 16)
    resident = (0 if fsdp["param_offload"] else weights) + (0 if fsdp["optimizer_offload"] else optimizer)
    vllm = float(arr["rollout"]["gpu_memory_utilization"]) * gpu_gb * GB
    return Estimate(model, gpus, gpu_gb, weights, grads, optimizer, logits, activations, vllm, resident)


def plan(cfg: dict[str, Any]) -> dict[str, Any]:
    """The memory plan a config states (``memrl_memory_plan``: model, gpus, gpu_memory_gb)."""
    return dict(cfg["memrl_memory_plan"])


def planned_estimate(cfg: dict[str, Any]) -> Estimate:
    """The estimate for the plan the config itself states."""
    claim = plan(cfg)
    return estimate(
        cfg, MODELS[claim["model"]], gpus=int(claim["gpus"]), gpu_gb=float(claim["gpu_memory_gb"])
    )


CONFIG_DIR = Path(__file__).resolve().parents[3] / "configs" / "verl"


def shipped() -> list[str]:
    """The task configs of ``configs/verl`` (every file but the shared base)."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml") if p.stem != "memrl_base")


def compose(name: str, overrides: list[str] | None = None) -> dict[str, Any]:
    """A config of ``configs/verl`` as verl's ``main_ppo`` composes it (Hydra), resolved, as a plain dict.
    ``hydra.*`` overrides are dropped (they configure Hydra's run, not the config)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    if not CONFIG_DIR.is_dir():
        raise FileNotFoundError(f"{CONFIG_DIR}: memrl's verl configs live in its repository checkout")
    kept = [o for o in overrides or [] if not o.lstrip("+~").startswith("hydra.")]
    with initialize_config_dir(version_base=None, config_dir=str(CONFIG_DIR)):
        cfg = hydra_compose(config_name=name, overrides=kept)
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def table() -> list[str]:
    """The markdown table of every shipped config's plan (docs/verl.md, Memory)."""
    g = lambda x: f"{x / GB:.1f}"  # noqa: E731
    lines = ["| config | plan | peak per GPU (GB) | training: weights + grads + AdamW + logits + activations | "
             "rollout: vLLM + actor resident |", "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for name in shipped():
        e = planned_estimate(compose(name))
        lines.append(f"| {name} | {e.model.name}, {e.gpus} x {e.gpu_gb:g} GB | {g(e.peak)} | {g(e.weights)} + "
                     f"{g(e.grads)} + {g(e.optimizer)} + {g(e.logits)} + {g(e.activations)} | {g(e.vllm)} + "
                     f"{g(e.resident_in_rollout)} |")  # fmt: skip
    return lines


def launch_report(cfg: dict[str, Any], model: str, gpus: int, gpu_gb: float | None) -> list[str]:
    """What a launch prints: the estimate for the model and GPUs actually used."""
    try:
        spec = model_spec(model)
    except (FileNotFoundError, KeyError, ValueError) as e:
        return [f"memory estimate: skipped ({e})"]
    claim = plan(cfg)
    gb = float(gpu_gb or claim["gpu_memory_gb"])
    est = estimate(cfg, spec, gpus=gpus, gpu_gb=gb)
    out = [f"memory estimate: {est.line()}",
           f"  (the config's plan: {claim['model']} on {claim['gpus']} GPU(s) of {claim['gpu_memory_gb']} GB)"]  # fmt: skip
    if not est.fits:
        out.append("  to fit: more GPUs (FSDP shards weights, grads and AdamW over them), a smaller model, or a "
                   "lower actor_rollout_ref.actor.ppo_max_token_len_per_gpu (docs/verl.md, Memory)")  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m memrl.integrations.verl.memory_plan", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--config", help="a config of configs/verl; without it: the table of every shipped one")
    ap.add_argument("--model", help="model folder (config.json) or a name of MODELS")
    ap.add_argument("--gpus", type=int, default=1, help="GPUs in all (nodes x GPUs per node)")
    ap.add_argument("--gpu-gb", type=float, default=None, help="memory of one GPU; default the config's plan")
    ap.add_argument("overrides", nargs="*", help="hydra overrides, as given to verl's main_ppo")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    if args.config is None:
        print("\n".join(table()))
        return 0
    try:
        cfg = compose(args.config, args.overrides)
    except Exception as e:  # a launch goes on: verl reports a bad config with its own message
        print(f"memory estimate: skipped (could not compose {args.config}: {type(e).__name__}: {e})")
        return 0
    print("\n".join(launch_report(cfg, args.model or plan(cfg)["model"], args.gpus, args.gpu_gb)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
