#!/usr/bin/env bash
# Train one memrl task with verl on a multi-node Ray cluster.
#   on the head node:    scripts/verl_cluster.sh head
#   on every worker:     scripts/verl_cluster.sh worker HEAD_IP
#   then, on the head:   NNODES=4 scripts/verl_cluster.sh submit read|update|build MODEL TRAIN_PARQUET [VAL] [overrides...]
# Every node needs the same environment (pip install "memrl[verl]" + vLLM or SGLang) and the model
# folder at the same path; the parquet rows are self-contained (documents travel inside them).
set -euo pipefail
port=${RAY_PORT:-6379}
case "${1:-}" in
  head)   ray start --head --port="$port" --dashboard-host=0.0.0.0 ;;
  worker) ray start --address="${2:?head ip}:$port" ;;
  submit)
    shift; task=${1:?task}; model=${2:?model}; train=${3:?train parquet}; val=${4:-$train}
    shift $(( $# >= 4 ? 4 : 3 ))
    case "$task" in read) cfg=memagent ;; update) cfg=memupdate ;; build) cfg=membuilder ;;
      *) echo "task must be read, update or build" >&2; exit 2 ;; esac
    here=$(cd "$(dirname "$0")/.." && pwd)
    cd "$here"
    # verl's main_ppo joins the running cluster (RAY_ADDRESS); the memrl plugin loads in every worker
    # through the verl.plugins entry point, so nothing else has to be shipped.
    RAY_ADDRESS=${RAY_ADDRESS:-auto} exec python -m verl.trainer.main_ppo \
      --config-path="$here/configs/verl" --config-name="$cfg" \
      data.train_files="$train" data.val_files="$val" actor_rollout_ref.model.path="$model" \
      trainer.nnodes="${NNODES:?set NNODES}" trainer.n_gpus_per_node="${GPUS_PER_NODE:-8}" "$@" ;;
  *) echo "usage: $0 head | worker HEAD_IP | submit TASK MODEL TRAIN [VAL] [overrides]" >&2; exit 2 ;;
esac
