# Sourced by verl_train.sh and verl_cluster.sh: a task's config name and the overrides every launch needs.
# Paths become absolute: verl's Ray workers resolve relative ones against their own working directory.

# memrl_verl_config TASK: the config name; CONFIG=NAME picks another file of configs/verl (a recipe such as
# memagent_ruler_locomo; hydra's --config-name cannot follow the overrides the scripts pass).
memrl_verl_config() {
  if [ -n "${CONFIG:-}" ]; then echo "$CONFIG"; return; fi
  case "$1" in read) echo memagent ;; update) echo memupdate ;; build) echo membuilder ;;
    *) echo "task must be read, update or build, got $1" >&2; return 2 ;; esac
}

# memrl_verl_args TRAIN VAL|none: fills the array VERL_ARGS. LOOPS=FILE picks another shipped agent-loop file
# (one of memrl.integrations.verl.resources.FILES; default agent_loops.yaml).
memrl_verl_args() {
  local train val loops
  train=$(realpath -m "$1")
  loops=$(python -m memrl.integrations.verl.resources "${LOOPS:-agent_loops.yaml}")
  VERL_ARGS=(data.train_files="$train" actor_rollout_ref.rollout.agent.agent_loop_config_path="$loops")
  if [ "$2" = none ]; then
    # verl always builds a validation dataloader from data.val_files; with `none` it gets the training
    # file but never evaluates it (no validation before training, test_freq -1)
    echo "no validation file: validation is off" >&2
    VERL_ARGS+=(data.val_files="$train" trainer.test_freq=-1 trainer.val_before_train=false)
  else
    val=$(realpath -m "$2")
    [ "$val" != "$train" ] || echo "warning: validating on the training file" >&2
    VERL_ARGS+=(data.val_files="$val")
  fi
}

# memrl_verl_preflight CONFIG MODEL GPUS NODES [overrides...]: the preflight checks and the memory estimate
# (memrl.integrations.verl.preflight; a FAIL stops the launch), then appends the attention override to
# VERL_ARGS (flash_attention_2 if flash_attn imports, else sdpa). MEMRL_SKIP_PREFLIGHT=1: the override only.
memrl_verl_preflight() {
  local cfg=$1 model=$2 gpus=$3 nodes=$4; shift 4
  if [ "${MEMRL_SKIP_PREFLIGHT:-0}" != 1 ]; then
    python -m memrl.integrations.verl.preflight --config "$cfg" --rollout "${ROLLOUT:-vllm}" --gpus "$gpus" \
      --nodes "$nodes" --model "$model" -- "${VERL_ARGS[@]}" "$@" \
      || { echo "preflight failed: fix the FAIL lines above (MEMRL_SKIP_PREFLIGHT=1 skips the checks)" >&2; return 1; }
  fi
  VERL_ARGS+=("$(python -m memrl.integrations.verl.preflight --config "$cfg" --attn-override)")
}
