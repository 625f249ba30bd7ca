#!/usr/bin/env bash
# Replaces q2.sh after its SFT-only validation run started (q2's bash stopped; the run, pid $1, goes on):
# the validation GRPO run took 66 min, so the test seed 0 pair (about 2 h) cannot end in this session and is
# left for the next (no test touch begun here). Waits for the SFT-only run, then issue 59's insert-rate check
# (no torch job beside it): bfbac86 against schema 8 with sorted rows, alternated, 100k items each.
set -euo pipefail
while kill -0 "$1" 2>/dev/null; do sleep 20; done
echo "$(date -u +%FT%TZ) sftonly-val-s0 ended"
PY=${PY:-/work/main/.venv/bin/python}
I=/work/main/runs/store/2026-12-03-pg-insert; mkdir -p "$I"
for k in 1 2; do
  for v in old ins; do
    echo "$(date -u +%FT%TZ) insert_rate $v $k"
    (cd /work/wt-$v && $PY -m bench.insert_rate --n 100000 --rounds 1 > "$I/$v-$k.out" 2> "$I/$v-$k.err"; tail -1 "$I/$v-$k.out" > "$I/$v-$k.json")
  done
done
echo "$(date -u +%FT%TZ) q3 done"
