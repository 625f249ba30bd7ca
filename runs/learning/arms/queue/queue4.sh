#!/bin/bash
# issue 54 arms on a contended machine (16 rollouts took 491 s): answer-only SFT's validation run, its
# seed-0 policy on test, the untrained model on the same test items; then RAFT if time is left
cd /work/wt54b
export PYTHONPATH=/work/wt54b MEMRL_DATA_DIR=/work/shared/data HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
P=/work/main/.venv/bin/python
LOG=runs/arms-queue
R=runs/learning/arms
AD=runs/arms-adapters
L=runs/learning/arms/test-evaluations.jsonl
COMMON="--ruler-task niah_single_1 --length 1k --train-items 24 --eval-items 12 --chunk-tokens 512 --memory-tokens 48 --answer-tokens 24 --reward reward --rollouts 48 --group-size 8 --tasks-per-step 2 --temperature 0.7 --lr 3e-4 --lora-rank 16 --keep positive --sft-epochs 1 --sft-batch 8 --batch 24 --quiet --ledger $L"
job() { name=$1; shift; echo "$(date -u +%T) start $name" >> $LOG/queue.log
  nice -n 5 $P -m bench.learning_arms "$@" --out $R/$name > $LOG/$name.log 2>&1
  echo "$(date -u +%T) end $name rc=$?" >> $LOG/queue.log; }
echo "$(date -u +%T) grpo-val-s0 stopped after its first step (604 s; the budget could not fit)" >> $LOG/queue.log
job answer-sft-val-s0 --arm answer-sft $COMMON --eval-split validation --seed 0 --watch-items 0 --adapter-dir $AD/answer-sft-s0
job answer-sft-test-s0 --arm answer-sft $COMMON --eval-split test --seed 0 --watch-items 0 --from-run $R/answer-sft-val-s0
job untrained-test --arm untrained $COMMON --eval-split test
job raft-val-s0 --arm raft $COMMON --eval-split validation --seed 0 --watch-items 0 --adapter-dir $AD/raft-s0
echo "$(date -u +%T) queue done" >> $LOG/queue.log
