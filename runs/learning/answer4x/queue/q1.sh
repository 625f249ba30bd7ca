#!/usr/bin/env bash
# Issue 54, the `answer` protocol re-run: GRPO given 4x its earlier steps (52-65 a seed -> 240) after the
# same 4-minute SFT, against SFT alone given the GRPO run's SFT + GRPO time; the reward is the per-category
# one (multi-hop paid by LoCoMo's comma-split F1, e31d395). Validation seed 0 first, then test seed 0.
# Run from the repository root: bash runs/learning/answer4x/queue/q1.sh > runs/learning/answer4x/queue/q1.log 2>&1
set -euo pipefail
R=${R:-runs/learning/answer4x}  # outputs; absolute when run from a worktree
PY=${PY:-.venv/bin/python}
LEDGER=${LEDGER:-runs/learning/protocol/test-evaluations.jsonl}
export MEMRL_DATA_DIR=${MEMRL_DATA_DIR:-/work/shared/data}
COMMON="--task answer --sft-lr 5e-5 --sft-batch 8 --top-k 3 --answer-tokens 16 --eval-questions 50
        --lr 3e-4 --lora-rank 16 --group-size 8 --tasks-per-step 2 --temperature 0.7 --quiet --ledger $LEDGER"
SFT4="--sft-minutes 4"
pair() {  # split seed
  local split=$1 seed=$2 tag; tag=$([ "$1" = validation ] && echo val || echo test)
  echo "$(date -u +%FT%TZ) grpo4x-$tag-s$seed start"
  $PY -m bench.learning $COMMON $SFT4 --steps 240 --budget-minutes 80 --eval-split "$split" --seed "$seed" \
      --out "$R/grpo4x-$tag-s$seed" > "$R/grpo4x-$tag-s$seed.jsonl"
  local minutes
  minutes=$($PY -c "import json,sys; d=json.load(open(sys.argv[1])); print(round((d['sft_s']+d['train_s'])/60, 2))" \
            "$R/grpo4x-$tag-s$seed/learning.json")
  echo "$(date -u +%FT%TZ) sftonly-$tag-s$seed start: --sft-minutes $minutes (the GRPO run's SFT + GRPO time)"
  $PY -m bench.learning $COMMON --steps 0 --sft-minutes "$minutes" --budget-minutes 80 --eval-split "$split" \
      --seed "$seed" --out "$R/sftonly-$tag-s$seed" > "$R/sftonly-$tag-s$seed.jsonl"
  echo "$(date -u +%FT%TZ) pair $tag s$seed done"
}
pair validation 0
pair test 0
