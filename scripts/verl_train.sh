#!/usr/bin/env bash
# Train one memrl task with verl on ONE node (all its GPUs).
#   scripts/verl_train.sh read|update|build MODEL_DIR TRAIN_PARQUET VAL_PARQUET|none [hydra overrides...]
# VAL none: no validation. GPUS=N: use N GPUs (default: what nvidia-smi lists).
# Needs: pip install "memrl[verl]" plus a rollout engine (vLLM or SGLang) on a GPU machine. docs/verl.md.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/verl_common.sh"
task=${1:?task: read|update|build}; model=${2:?model folder or hub id}; train=${3:?train parquet}
val=${4:?validation parquet, or none}; shift 4
cfg=$(memrl_verl_config "$task")
gpus=${GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
[ "$gpus" -ge 1 ] || { echo "no GPU found: verl's rollout (vLLM/SGLang) needs one" >&2; exit 2; }
memrl_verl_args "$train" "$val"
exec python -m verl.trainer.main_ppo --config-path="$here/configs/verl" --config-name="$cfg" \
  "${VERL_ARGS[@]}" actor_rollout_ref.model.path="$model" \
  trainer.n_gpus_per_node="$gpus" trainer.nnodes=1 "$@"
