#!/bin/bash
# after queue4: RAFT's seed-0 policy on test, if its validation run finished and there is time
cd /work/wt54b
export PYTHONPATH=/work/wt54b MEMRL_DATA_DIR=/work/shared/data HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
while kill -0 31007 2>/dev/null; do sleep 5; done
P=/work/main/.venv/bin/python
LOG=runs/arms-queue
R=runs/learning/arms
L=runs/learning/arms/test-evaluations.jsonl
COMMON="--ruler-task niah_single_1 --length 1k --train-items 24 --eval-items 12 --chunk-tokens 512 --memory-tokens 48 --answer-tokens 24 --reward reward --rollouts 48 --group-size 8 --tasks-per-step 2 --temperature 0.7 --lr 3e-4 --lora-rank 16 --keep positive --sft-epochs 1 --sft-batch 8 --batch 24 --quiet --ledger $L"
if [ -f $R/raft-val-s0/arm.json ] && [ $(date -u +%H%M) -lt 1733 ]; then
  echo "$(date -u +%T) start raft-test-s0" >> $LOG/queue.log
  nice -n 5 $P -m bench.learning_arms --arm raft $COMMON --eval-split test --seed 0 --watch-items 0 --from-run $R/raft-val-s0 --out $R/raft-test-s0 > $LOG/raft-test-s0.log 2>&1
  echo "$(date -u +%T) end raft-test-s0 rc=$?" >> $LOG/queue.log
fi
