#!/bin/bash
# issue 54, second experiment (niah_multivalue 1k, 48-token memory, value-set reward): test seeds 1 and 2,
# each setting trained again with its seed-0 validation settings (cut-long: the SFT seconds of cut-grpo's
# validation run, 836.7 s). One torch job at a time. The time-bounded arm (cut-long) runs first in each seed,
# so that it is the one least likely to share the CPU with other work.
cd /work/wt54
export PYTHONPATH=/work/wt54 MEMRL_DATA_DIR=/work/shared/data HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
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
T=$($P -c "import json;print(json.load(open('$R/cut-grpo-val/arm.json'))['train_s'])")
for s in 1 2; do
  job cut-long-test-s$s --arm expert-sft $COMMON --expert cut --sft-seconds $T --eval-split test --seed $s --adapter-dir $AD/cut-long-s$s
  job cut-test-s$s --arm expert-sft $COMMON --expert cut --eval-split test --seed $s --adapter-dir $AD/cut-s$s
  job cut-grpo-test-s$s --arm expert-sft-grpo $COMMON --expert cut --eval-split test --seed $s --adapter-dir $AD/cut-grpo-s$s
  job compressed-test-s$s --arm expert-sft $COMMON --expert compressed --eval-split test --seed $s --adapter-dir $AD/compressed-s$s
done
echo "$(date -u +%T) mv3 done" >> $LOG/queue.log
