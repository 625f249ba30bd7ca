#!/usr/bin/env bash
# GPU smoke run, one command: a few verl training steps per memrl task (read, update, build) on the bundled
# sample conversation, on ONE GPU, then a per-task summary (steps, mean reward, groups with reward variance,
# failed rollouts); exits 1 at the end if any task failed (every task runs whatever happened to the others).
#   scripts/verl_smoke.sh MODEL_DIR [vllm|sglang]      e.g. MODEL_DIR = a local Qwen2.5-0.5B-Instruct
# STEPS=3 (training steps per task), MEMRL_SMOKE_DIR (rows, logs, rollouts, checkpoints; default a temp
# folder), MEMRL_SMOKE_OVERRIDES (extra hydra overrides for every task), TASKS="read update build".
# First: preflight checks (GPU, versions, free memory, CPUs) and the memory estimate; a failing check stops.
# It has NOT been run on a GPU (memrl's machines have none); tests/test_verl_configs.py runs it on CPU up
# to verl's validate_config. Expected figures and what to look at: docs/verl.md.
set -uo pipefail
model=${1:?model folder, e.g. Qwen2.5-0.5B-Instruct}; rollout=${2:-vllm}; steps=${STEPS:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
out=${MEMRL_SMOKE_DIR:-$(mktemp -d)}; mkdir -p "$out"
out=$(realpath "$out")
read -r -a extra <<< "${MEMRL_SMOKE_OVERRIDES:-}"
# each task keeps its config's prompt/response lengths: a call over them fails its rollout (the prompt-length
# cap), and MemUpdate's episodes grow with every tool result (its config: 8192 + 8192 tokens)
tasks=(${TASKS:-read update build})
smoke=(actor_rollout_ref.rollout.name="$rollout" actor_rollout_ref.rollout.n=2
  actor_rollout_ref.rollout.gpu_memory_utilization=0.4
  data.train_batch_size=2 actor_rollout_ref.actor.ppo_mini_batch_size=2
  trainer.total_training_steps="$steps" trainer.save_freq=-1)
for task in "${tasks[@]}"; do
  rm -f "$out/$task.rc"
  python -m memrl.cli.main data prepare --format verl --task "$task" --dataset sample --max-rows 4 \
    --output "$out/$task.parquet" || echo $? > "$out/$task.rc"
done
for task in "${tasks[@]}"; do
  echo "== $task"
  [ -f "$out/$task.rc" ] && { echo "rows for $task were not written: skipped"; continue; }
  GPUS=${GPUS:-1} ROLLOUT="$rollout" "$here/scripts/verl_train.sh" "$task" "$model" "$out/$task.parquet" none \
    "${smoke[@]}" trainer.experiment_name="smoke-$task" trainer.default_local_dir="$out/ckpt-$task" \
    trainer.rollout_data_dir="$out/rollouts-$task" "${extra[@]}" 2>&1 | tee "$out/$task.log"
  echo "${PIPESTATUS[0]}" > "$out/$task.rc"
done
python -m memrl.integrations.verl.smoke "$out" "${tasks[@]}" --steps "$steps"
