#!/bin/bash
# issue 54, second experiment, after mv1 (validation): test once per setting and seed. Seed 0 evaluates the
# policy its validation run trained (--from-run); seeds 1 and 2 train again with the same setting (cut-long:
# the SFT seconds of cut-grpo's validation run). Between them, issue 60's QA re-runs. One torch job at a time.
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
while ! grep -q 'mv1 done' $LOG/queue.log 2>/dev/null; do sleep 20; done
T=$($P -c "import json;print(json.load(open('$R/cut-grpo-val/arm.json'))['train_s'])")
job untrained-test --arm untrained $COMMON --eval-split test --seed 0
job cut-test-s0 --arm expert-sft $COMMON --expert cut --eval-split test --seed 0 --from-run $R/cut-val
job cut-grpo-test-s0 --arm expert-sft-grpo $COMMON --expert cut --eval-split test --seed 0 --from-run $R/cut-grpo-val
job cut-long-test-s0 --arm expert-sft $COMMON --expert cut --sft-seconds $T --eval-split test --seed 0 --from-run $R/cut-long-val
job compressed-test-s0 --arm expert-sft $COMMON --expert compressed --eval-split test --seed 0 --from-run $R/compressed-val
# issue 60: the QA rows that quote search, answered again with the search defaults chosen by the
# leave-one-dataset-out protocol (convex 0.4/0.6); main's code, the answer cache serving unchanged prompts
qa() { name=$1; shift; echo "$(date -u +%T) start $name" >> $LOG/queue.log
  if [ -f /tmp/mv_stop ]; then echo "$(date -u +%T) skipped $name (/tmp/mv_stop)" >> $LOG/queue.log; return; fi
  (cd /work/main && env -u PYTHONPATH MEMRL_DATA_DIR=/work/shared/data nice -n 5 .venv/bin/memrl eval "$@" > /tmp/qa-$name.log 2>&1)
  echo "$(date -u +%T) end $name rc=$?" >> $LOG/queue.log; }
qa lme-qa-raw --dataset longmemeval --data-path /work/shared/data/longmemeval/longmemeval_oracle_part_a.json --builder raw --provider local --top-k 10 --concurrency 8 --output-dir /tmp/qa/lme-qa-raw
qa locomo-test-raw --dataset locomo --split test --builder raw --provider local --top-k 10 --concurrency 8 --output-dir /tmp/qa/locomo-test-raw
for s in 1 2; do
  job cut-test-s$s --arm expert-sft $COMMON --expert cut --eval-split test --seed $s --adapter-dir $AD/cut-s$s
  job cut-grpo-test-s$s --arm expert-sft-grpo $COMMON --expert cut --eval-split test --seed $s --adapter-dir $AD/cut-grpo-s$s
  job cut-long-test-s$s --arm expert-sft $COMMON --expert cut --sft-seconds $T --eval-split test --seed $s --adapter-dir $AD/cut-long-s$s
  job compressed-test-s$s --arm expert-sft $COMMON --expert compressed --eval-split test --seed $s --adapter-dir $AD/compressed-s$s
done
echo "$(date -u +%T) mv2 done" >> $LOG/queue.log
