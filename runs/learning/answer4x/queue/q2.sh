#!/usr/bin/env bash
# Replaces q1.sh from its first SFT-only run on (q1's bash was stopped while grpo4x-val-s0 ran, so that the
# order below fits the session): wait for grpo4x-val-s0 (pid $1), SFT alone for its time, then issue 59's
# insert-rate check (no torch job beside it), then the test seed 0 GRPO run, then its SFT-only control only
# if it can end before the session's end ($DEADLINE, epoch seconds). Run from a worktree of the tested commit:
#   R=/work/main/runs/learning/answer4x LEDGER=... PY=... DEADLINE=... bash .../q2.sh PID
set -euo pipefail
R=${R:-runs/learning/answer4x}
PY=${PY:-.venv/bin/python}
LEDGER=${LEDGER:-runs/learning/protocol/test-evaluations.jsonl}
export MEMRL_DATA_DIR=${MEMRL_DATA_DIR:-/work/shared/data}
COMMON="--task answer --sft-lr 5e-5 --sft-batch 8 --top-k 3 --answer-tokens 16 --eval-questions 50
        --lr 3e-4 --lora-rank 16 --group-size 8 --tasks-per-step 2 --temperature 0.7 --quiet --ledger $LEDGER"
minutes_of() { $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print(round((d['sft_s']+d['train_s'])/60, 2))" "$1"; }
sftonly() {  # split seed minutes
  local tag; tag=$([ "$1" = validation ] && echo val || echo test)
  echo "$(date -u +%FT%TZ) sftonly-$tag-s$2 start: --sft-minutes $3 (the GRPO run's SFT + GRPO time)"
  $PY -m bench.learning $COMMON --steps 0 --sft-minutes "$3" --budget-minutes 80 --eval-split "$1" \
      --seed "$2" --out "$R/sftonly-$tag-s$2" > "$R/sftonly-$tag-s$2.jsonl"
  echo "$(date -u +%FT%TZ) sftonly-$tag-s$2 done"
}
while kill -0 "$1" 2>/dev/null; do sleep 20; done
echo "$(date -u +%FT%TZ) grpo4x-val-s0 ended"
sftonly validation 0 "$(minutes_of "$R/grpo4x-val-s0/learning.json")"

# issue 59: Postgres insert rate before (bfbac86) and after (schema 8 + sorted rows), alternated, 100k each
I=/work/main/runs/store/2026-12-03-pg-insert; mkdir -p "$I"
for k in 1 2; do
  for v in old ins; do
    echo "$(date -u +%FT%TZ) insert_rate $v $k"
    (cd /work/wt-$v && $PY -m bench.insert_rate --n 100000 --rounds 1 > "$I/$v-$k.out" 2> "$I/$v-$k.err"; tail -1 "$I/$v-$k.out" > "$I/$v-$k.json")
  done
done

echo "$(date -u +%FT%TZ) grpo4x-test-s0 start"
$PY -m bench.learning $COMMON --sft-minutes 4 --steps 240 --budget-minutes 80 --eval-split test --seed 0 \
    --out "$R/grpo4x-test-s0" > "$R/grpo4x-test-s0.jsonl"
m=$(minutes_of "$R/grpo4x-test-s0/learning.json")
need=$(python3 -c "print(int(($m + 9) * 60))")
if [ $(( $(date +%s) + need )) -lt "${DEADLINE:-0}" ]; then
  sftonly test 0 "$m"
else
  echo "$(date -u +%FT%TZ) sftonly-test-s0 not started: needs about $need s, the session ends before (left for the next)"
fi
echo "$(date -u +%FT%TZ) q2 done"
