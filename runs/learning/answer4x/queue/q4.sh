#!/usr/bin/env bash
# Issue 54, the `answer` protocol re-run on test, seed 0: GRPO given 4x its earlier steps (240) after the
# 4-minute SFT, then SFT alone for the GRPO run's SFT + GRPO time (as many passes as fit: c383ca7), the
# control only if it can end before the session's end ($DEADLINE, epoch seconds). Validation seed 0 of the
# same pair is grpo4x-val-s0 / sftonly-val-s0 (the latter cut at one pass by the bug c383ca7 fixed).
# Run from a worktree of the tested commit:
#   R=/work/main/runs/learning/answer4x LEDGER=... PY=... DEADLINE=... bash .../q4.sh
set -euo pipefail
R=${R:-runs/learning/answer4x}
PY=${PY:-.venv/bin/python}
LEDGER=${LEDGER:-runs/learning/protocol/test-evaluations.jsonl}
export MEMRL_DATA_DIR=${MEMRL_DATA_DIR:-/work/shared/data}
COMMON="--task answer --sft-lr 5e-5 --sft-batch 8 --top-k 3 --answer-tokens 16 --eval-questions 50
        --lr 3e-4 --lora-rank 16 --group-size 8 --tasks-per-step 2 --temperature 0.7 --quiet --ledger $LEDGER"
minutes_of() { $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print(round((d['sft_s']+d['train_s'])/60, 2))" "$1"; }
echo "$(date -u +%FT%TZ) grpo4x-test-s0 start ($(git rev-parse --short HEAD))"
$PY -m bench.learning $COMMON --sft-minutes 4 --steps 240 --budget-minutes 80 --eval-split test --seed 0 \
    --out "$R/grpo4x-test-s0" > "$R/grpo4x-test-s0.jsonl"
m=$(minutes_of "$R/grpo4x-test-s0/learning.json")
need=$(python3 -c "print(int(($m + 9) * 60))")
if [ $(( $(date +%s) + need )) -lt "${DEADLINE:-0}" ]; then
  echo "$(date -u +%FT%TZ) sftonly-test-s0 start: --sft-minutes $m (the GRPO run's SFT + GRPO time)"
  $PY -m bench.learning $COMMON --steps 0 --sft-minutes "$m" --budget-minutes 80 --eval-split test \
      --seed 0 --out "$R/sftonly-test-s0" > "$R/sftonly-test-s0.jsonl"
  echo "$(date -u +%FT%TZ) sftonly-test-s0 done"
else
  echo "$(date -u +%FT%TZ) sftonly-test-s0 not started: needs about $need s, the session ends before (left for the next)"
fi
echo "$(date -u +%FT%TZ) q4 done"
