#!/usr/bin/env bash
# Train one memrl task with verl on ONE node (all its GPUs).
#   scripts/verl_train.sh read|update|build MODEL_DIR TRAIN_PARQUET [VAL_PARQUET] [hydra overrides...]
# Needs: pip install "memrl[verl]" plus a rollout engine (vLLM or SGLang) on a GPU machine.
set -euo pipefail
task=${1:?task: read|update|build}; model=${2:?model folder or hub id}; train=${3:?train parquet}
val=${4:-$train}; shift $(( $# >= 4 ? 4 : 3 ))
case "$task" in read) cfg=memagent ;; update) cfg=memupdate ;; build) cfg=membuilder ;;
  *) echo "task must be read, update or build, got $task" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"   # the configs name configs/verl/*.yaml relative to the repository
gpus=${GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
[ "$gpus" -ge 1 ] || { echo "no GPU found: verl's rollout (vLLM/SGLang) needs one" >&2; exit 2; }
exec python -m verl.trainer.main_ppo --config-path="$here/configs/verl" --config-name="$cfg" \
  data.train_files="$train" data.val_files="$val" \
  actor_rollout_ref.model.path="$model" \
  trainer.n_gpus_per_node="$gpus" trainer.nnodes=1 \
  "$@"
