#!/usr/bin/env bash
# Train one memrl task with verl on a multi-node Ray cluster.
#   on the head node:    scripts/verl_cluster.sh head
#   on every worker:     scripts/verl_cluster.sh worker HEAD_IP
#   then, on the head:   NNODES=2 GPUS_PER_NODE=8 scripts/verl_cluster.sh submit read|update|build MODEL TRAIN VAL|none [overrides...]
# Every node needs the same environment (pip install "memrl[verl]" + vLLM or SGLang) and the model folder
# at the same path; the parquet rows are self-contained (documents travel inside them) and are read on the
# head. memrl's agent loops load in every worker through the verl.plugins entry point. docs/verl.md.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/verl_common.sh"
port=${RAY_PORT:-6379}
case "${1:-}" in
  head)   ray start --head --port="$port" --dashboard-host=0.0.0.0 ;;
  worker) ray start --address="${2:?head ip}:$port" ;;
  submit)
    shift; task=${1:?task}; model=${2:?model}; train=${3:?train parquet}; val=${4:?validation parquet, or none}
    shift 4
    cfg=$(memrl_verl_config "$task")
    memrl_verl_args "$train" "$val"
    # checks this (head) node's GPUs; every node should match it
    memrl_verl_preflight "$cfg" "$model" "${GPUS_PER_NODE:-8}" "${NNODES:?set NNODES}" "$@"
    # verl's main_ppo joins the running cluster (RAY_ADDRESS)
    RAY_ADDRESS=${RAY_ADDRESS:-auto} exec python -m verl.trainer.main_ppo \
      --config-path="$here/configs/verl" --config-name="$cfg" \
      "${VERL_ARGS[@]}" actor_rollout_ref.model.path="$model" \
      trainer.nnodes="${NNODES:?set NNODES}" trainer.n_gpus_per_node="${GPUS_PER_NODE:-8}" "$@" ;;
  *) echo "usage: $0 head | worker HEAD_IP | submit TASK MODEL TRAIN VAL|none [overrides]" >&2; exit 2 ;;
esac
