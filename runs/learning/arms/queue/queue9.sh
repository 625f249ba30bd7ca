#!/bin/bash
# issue 54, continued from queue8 (stopped in raft-transfer-s0 at the session's end): the trained arms' transfer
# (seed 0, the policies validation chose), after the fresh-clone CI run; one torch job at a time.
cd /work/wt54c
export PYTHONPATH=/work/wt54c MEMRL_DATA_DIR=/work/shared/data HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
P=/work/main/.venv/bin/python
LOG=runs/arms-queue
R=runs/learning/arms
AD=runs/arms-adapters
L=runs/learning/arms/test-evaluations.jsonl
COMMON="--ruler-task niah_single_1 --length 1k --train-items 24 --eval-items 12 --chunk-tokens 512 --memory-tokens 48 --answer-tokens 24 --reward reward --rollouts 48 --group-size 8 --tasks-per-step 2 --temperature 0.7 --lr 3e-4 --lora-rank 16 --keep positive --sft-epochs 1 --sft-batch 8 --batch 24 --quiet --ledger $L"
job() { name=$1; shift; echo "$(date -u +%T) start $name" >> $LOG/queue.log
  nice -n 5 $P -m bench.learning_arms "$@" --out $R/$name > $LOG/$name.log 2>&1
  echo "$(date -u +%T) end $name rc=$?" >> $LOG/queue.log; }
while ! grep -q '^rc=' /tmp/fresh_ci.log 2>/dev/null; do sleep 20; done
rm -rf $R/raft-transfer-s0
for arm in raft grpo answer-sft; do
  job $arm-transfer-s0 --arm $arm $COMMON --eval-split test --seed 0 --from-run $R/$arm-val-s0 --transfer-only --transfer-items 12
done
echo "$(date -u +%T) queue9 done" >> $LOG/queue.log
