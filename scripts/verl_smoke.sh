#!/usr/bin/env bash
# GPU smoke test: ONE training step of verl.trainer.main_ppo per memrl task, on the bundled sample
# conversation, with a small model folder.   scripts/verl_smoke.sh MODEL_DIR [rollout: vllm|sglang]
# It needs a GPU and vLLM or SGLang: it CANNOT run on a CPU-only machine (verl 0.9 has no CPU rollout and
# rewrites trainer.device=cpu to cuda). Everything below the rollout boundary is tested on CPU by
# tests/test_verl_integration.py. Not run by memrl's CI.
set -euo pipefail
model=${1:?small model folder, e.g. Qwen2.5-0.5B-Instruct}; rollout=${2:-vllm}
here=$(cd "$(dirname "$0")/.." && pwd); out=$(mktemp -d); cd "$here"
for task in read update build; do
  memrl data prepare --format verl --task "$task" --dataset sample --max-rows 4 --output "$out/$task.parquet"
done
for task in read update build; do
  echo "== $task"
  scripts/verl_train.sh "$task" "$model" "$out/$task.parquet" "$out/$task.parquet" \
    actor_rollout_ref.rollout.name="$rollout" actor_rollout_ref.rollout.n=2 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 actor_rollout_ref.rollout.gpu_memory_utilization=0.4 \
    actor_rollout_ref.rollout.prompt_length=4096 actor_rollout_ref.rollout.response_length=2048 \
    data.train_batch_size=2 actor_rollout_ref.actor.ppo_mini_batch_size=2 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1 \
    trainer.total_training_steps=1 trainer.test_freq=-1 trainer.save_freq=-1 trainer.val_before_train=false \
    trainer.experiment_name="smoke-$task" trainer.default_local_dir="$out/ckpt-$task"
done
echo "smoke OK: one step per task; logs above"
