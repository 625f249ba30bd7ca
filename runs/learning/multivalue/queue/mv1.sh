#!/bin/bash
# issue 54, second experiment: read on RULER niah_multivalue at 1k, 48-token memory, value-set reward;
# the validation runs of every arm (seed 0), one torch job at a time. Adapters under runs/mv-adapters (not in git).
cd /work/wt54d
export PYTHONPATH=/work/wt54d MEMRL_DATA_DIR=/work/shared/data HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
P=/work/main/.venv/bin/python
LOG=runs/mv-queue
R=runs/learning/multivalue
AD=runs/mv-adapters
L=$R/test-evaluations.jsonl
COMMON="--ruler-task niah_multivalue --length 1k --train-items 24 --eval-items 12 --chunk-tokens 512 --memory-tokens 48 --answer-tokens 48 --reward values --rollouts 48 --group-size 8 --tasks-per-step 2 --temperature 0.7 --lr 3e-4 --lora-rank 16 --sft-epochs 1 --sft-batch 8 --batch 24 --quiet --watch-items 0 --ledger $L"
job() { name=$1; shift; echo "$(date -u +%T) start $name" >> $LOG/queue.log
  if [ -f /tmp/mv_stop ]; then echo "$(date -u +%T) skipped $name (/tmp/mv_stop)" >> $LOG/queue.log; return; fi
  nice -n 5 $P -m bench.learning_arms "$@" --out $R/$name > $LOG/$name.log 2>&1
  echo "$(date -u +%T) end $name rc=$?" >> $LOG/queue.log; }
job untrained-val --arm untrained $COMMON --eval-split validation --seed 0
job cut-val --arm expert-sft $COMMON --expert cut --eval-split validation --seed 0 --adapter-dir $AD/cut-s0
job cut-grpo-val --arm expert-sft-grpo $COMMON --expert cut --eval-split validation --seed 0 --adapter-dir $AD/cut-grpo-s0
T=$($P -c "import json;print(json.load(open('$R/cut-grpo-val/arm.json'))['train_s'])" 2>/dev/null || echo 1200)
job cut-long-val --arm expert-sft $COMMON --expert cut --sft-seconds $T --eval-split validation --seed 0 --adapter-dir $AD/cut-long-s0
job compressed-val --arm expert-sft $COMMON --expert compressed --eval-split validation --seed 0 --adapter-dir $AD/compressed-s0
echo "$(date -u +%T) mv1 done" >> $LOG/queue.log
