#!/usr/bin/env bash
# Issue 54, the `answer` protocol re-run on test, seed $SEED (default 1): GRPO given 4x its earlier steps (240) after the
# 4-minute SFT, then SFT alone for the GRPO run's SFT + GRPO time (as many passes as fit: c383ca7), the
# control only if it can end before the session's end ($DEADLINE, epoch seconds). Seed 0's pair ran through q4.sh.
# Run from a worktree of the tested commit:
#   R=/work/main/runs/learning/answer4x LEDGER=... PY=... DEADLINE=... SEED=1 bash .../q5.sh
# Each seed: GRPO about 66 min, then its control about 63 min.
set -euo pipefail
SEED=${SEED:-1}
R=${R:-runs/learning/answer4x}
PY=${PY:-.venv/bin/python}
LEDGER=${LEDGER:-runs/learning/protocol/test-evaluations.jsonl}
export MEMRL_DATA_DIR=${MEMRL_DATA_DIR:-/work/shared/data}
COMMON="--task answer --sft-lr 5e-5 --sft-batch 8 --top-k 3 --answer-tokens 16 --eval-questions 50
        --lr 3e-4 --lora-rank 16 --group-size 8 --tasks-per-step 2 --temperature 0.7 --quiet --ledger $LEDGER"
minutes_of() { $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print(round((d['sft_s']+d['train_s'])/60, 2))" "$1"; }
echo "$(date -u +%FT%TZ) grpo4x-test-s$SEED start ($(git rev-parse --short HEAD))"
$PY -m bench.learning $COMMON --sft-minutes 4 --steps 240 --budget-minutes 80 --eval-split test --seed "$SEED" \
    --out "$R/grpo4x-test-s$SEED" > "$R/grpo4x-test-s$SEED.jsonl"
m=$(minutes_of "$R/grpo4x-test-s$SEED/learning.json")
need=$(python3 -c "print(int(($m + 9) * 60))")
if [ $(( $(date +%s) + need )) -lt "${DEADLINE:-0}" ]; then
  echo "$(date -u +%FT%TZ) sftonly-test-s$SEED start: --sft-minutes $m (the GRPO run's SFT + GRPO time)"
  $PY -m bench.learning $COMMON --steps 0 --sft-minutes "$m" --budget-minutes 80 --eval-split test \
      --seed "$SEED" --out "$R/sftonly-test-s$SEED" > "$R/sftonly-test-s$SEED.jsonl"
  echo "$(date -u +%FT%TZ) sftonly-test-s$SEED done"
else
  echo "$(date -u +%FT%TZ) sftonly-test-s$SEED not started: needs about $need s, the session ends before (left for the next)"
fi
echo "$(date -u +%FT%TZ) q5 s$SEED done"
