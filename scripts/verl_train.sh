#!/usr/bin/env bash
# Train one memrl task with verl on ONE node (all its GPUs).
#   scripts/verl_train.sh read|update|build MODEL_DIR TRAIN_PARQUET VAL_PARQUET|none [hydra overrides...]
# VAL none: no validation. GPUS=N: use N GPUs (default: what nvidia-smi lists). ROLLOUT=sglang for SGLang.
# First: preflight checks (GPU, versions vs the tested set, free memory, CPUs for Ray), the memory estimate for
# this model and GPU count, and the attention implementation the installed packages allow (flash_attention_2
# when flash_attn imports, else sdpa). MEMRL_SKIP_PREFLIGHT=1 skips them.
# Needs: pip install -c constraints/verl-gpu.txt "memrl[verl-gpu]" on a GPU machine. docs/verl.md.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/verl_common.sh"
task=${1:?task: read|update|build}; model=${2:?model folder or hub id}; train=${3:?train parquet}
val=${4:?validation parquet, or none}; shift 4
cfg=$(memrl_verl_config "$task")
if [ -z "${GPUS:-}" ]; then
  command -v nvidia-smi >/dev/null || { echo "nvidia-smi not found: no NVIDIA driver on this machine, and verl's" \
    "rollout (vLLM/SGLang) needs a GPU. Run on a GPU machine, or set GPUS=N if the GPUs are visible without" \
    "nvidia-smi" >&2; exit 2; }
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
else
  gpus=$GPUS
fi
[ "$gpus" -ge 1 ] || { echo "nvidia-smi lists no GPU: verl's rollout (vLLM/SGLang) needs one (check" \
  "CUDA_VISIBLE_DEVICES and the container's GPU access)" >&2; exit 2; }
memrl_verl_args "$train" "$val"
memrl_verl_preflight "$cfg" "$model" "$gpus" 1 "$@"
exec python -m verl.trainer.main_ppo --config-path="$here/configs/verl" --config-name="$cfg" \
  "${VERL_ARGS[@]}" actor_rollout_ref.model.path="$model" \
  trainer.n_gpus_per_node="$gpus" trainer.nnodes=1 "$@"
