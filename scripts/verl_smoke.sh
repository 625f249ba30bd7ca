#!/usr/bin/env bash
# GPU smoke run, one command: a few verl training steps per memrl task (read, update, build) on the bundled
# sample conversation, on ONE GPU, then each task's mean reward per step.
#   scripts/verl_smoke.sh MODEL_DIR [vllm|sglang]      e.g. MODEL_DIR = a local Qwen2.5-0.5B-Instruct
# STEPS=3 (training steps per task), MEMRL_SMOKE_DIR (rows, logs, checkpoints; default a temp folder),
# MEMRL_SMOKE_OVERRIDES (extra hydra overrides for every task). Needs a GPU with vLLM or SGLang.
# It has NOT been run on a GPU (memrl's machines have none); tests/test_verl_configs.py runs it on CPU up
# to verl's validate_config. Expected figures and what to look at: docs/verl.md.
set -euo pipefail
model=${1:?model folder, e.g. Qwen2.5-0.5B-Instruct}; rollout=${2:-vllm}; steps=${STEPS:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
out=${MEMRL_SMOKE_DIR:-$(mktemp -d)}; mkdir -p "$out"
read -r -a extra <<< "${MEMRL_SMOKE_OVERRIDES:-}"
for task in read update build; do
  python -m memrl.cli.main data prepare --format verl --task "$task" --dataset sample --max-rows 4 \
    --output "$out/$task.parquet"
done
for task in read update build; do
  echo "== $task"
  GPUS=${GPUS:-1} "$here/scripts/verl_train.sh" "$task" "$model" "$out/$task.parquet" none \
    actor_rollout_ref.rollout.name="$rollout" actor_rollout_ref.rollout.n=2 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.4 \
    actor_rollout_ref.rollout.prompt_length=4096 actor_rollout_ref.rollout.response_length=2048 \
    data.train_batch_size=2 actor_rollout_ref.actor.ppo_mini_batch_size=2 \
    trainer.total_training_steps="$steps" trainer.save_freq=-1 \
    trainer.experiment_name="smoke-$task" trainer.default_local_dir="$out/ckpt-$task" \
    "${extra[@]}" 2>&1 | tee "$out/$task.log"
done
echo "== rewards (verl's critic/score/mean per step; logs in $out)"
python -m memrl.integrations.verl.smoke "$out/read.log" "$out/update.log" "$out/build.log"
