#!/bin/bash
# issue 54: the transfer runs of seeds 1 and 2 (seed 0's: queue9.sh). The seed 1-2 adapters of queue8 were lost
# with their machine, so each arm is trained again on its seed's fit items (the setting of queue8's test runs)
# and its policy scored on the transfer tasks only (--transfer-only: no second touch of the 1k test items).
# One torch job at a time.
cd /work/wt54e
export PYTHONPATH=/work/wt54e MEMRL_DATA_DIR=/work/shared/data HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
P=/work/main/.venv/bin/python
LOG=runs/arms-queue
R=runs/learning/arms
AD=runs/arms-adapters
L=runs/learning/arms/test-evaluations.jsonl
mkdir -p $LOG
COMMON="--ruler-task niah_single_1 --length 1k --train-items 24 --eval-items 12 --chunk-tokens 512 --memory-tokens 48 --answer-tokens 24 --reward reward --rollouts 48 --group-size 8 --tasks-per-step 2 --temperature 0.7 --lr 3e-4 --lora-rank 16 --keep positive --sft-epochs 1 --sft-batch 8 --batch 24 --quiet --ledger $L"
job() { name=$1; shift; echo "$(date -u +%T) start $name" >> $LOG/queue.log
  nice -n 5 $P -m bench.learning_arms "$@" --out $R/$name > $LOG/$name.log 2>&1
  echo "$(date -u +%T) end $name rc=$?" >> $LOG/queue.log; }
for s in 1 2; do
  for arm in raft grpo answer-sft; do
    job $arm-transfer-s$s --arm $arm $COMMON --eval-split test --seed $s --watch-items 0 --adapter-dir $AD/$arm-s$s --transfer-only --transfer-items 12
  done
done
echo "$(date -u +%T) queue10 done" >> $LOG/queue.log
