#!/usr/bin/env bash
# Issue 61's pre-registered runs (docs/results/builders.md, "Pre-registered claim"), in their order, as one
# queue that a session can stop and the next one continue: every step is skipped once its result is there,
# SFT stops at its time budget with a checkpoint and resumes (--resume), an evaluation killed at the end of
# a session resumes where it was (memrl eval --resume). Nothing here is chosen by hand: the epoch of each
# empty share by its lowest validation loss, the share by the highest validation F1 (ties: the smaller),
# then test and LongMemEval part A once, with that adapter.
#
# Run from a worktree of the commit being measured (its memrl is imported), with a deadline in epoch seconds:
#   R=/work/main/runs/learning/mb61 PY=/work/main/.venv/bin/python DEADLINE=$(date -d 18:40 +%s) bash .../q61.sh
# Cost on the 2-core CPU, from the kept runs: about 2 h per share's SFT (2 epochs), 30-40 min per LoCoMo
# evaluation, about 3.6 h for the builder on LongMemEval part A.
set -euo pipefail
R=${R:-runs/learning/mb61}
PY=${PY:-.venv/bin/python}
DEADLINE=${DEADLINE:?DEADLINE (epoch seconds) is required}
export MEMRL_DATA_DIR=${MEMRL_DATA_DIR:-/work/shared/data} HF_HUB_OFFLINE=1
CLI='import sys; from memrl.cli.main import main; sys.exit(main(sys.argv[1:]))'  # the worktree's memrl (cwd first)
LME=$MEMRL_DATA_DIR/longmemeval/longmemeval_oracle_part_a.json
mkdir -p "$R"
log() { echo "$(date -u +%FT%TZ) $*"; }
left_s() { echo $(( DEADLINE - $(date +%s) )); }
memrl() { "$PY" -c "$CLI" "$@"; }
# an evaluation, killed (then resumed by the next session) if it would run past the deadline
run_eval() {
  local out=$1; shift
  [ -f "$out/summary.json" ] && { log "$out done"; return 0; }
  local t=$(( $(left_s) - 120 ))
  [ "$t" -lt 600 ] && { log "stop: $out needs more time than is left"; exit 0; }
  log "$out start (at most $t s)"
  if ! timeout -s TERM "$t" "$PY" -c "$CLI" eval --resume --output-dir "$out" "$@"; then
    [ -f "$out/summary.json" ] || { log "stop: $out interrupted (resume it next time)"; exit 0; }
  fi
}
finished() { [ -f "$1/sft_summary.json" ] && $PY -c "import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))['finished'] else 1)" "$1/sft_summary.json"; }

# each share's epoch of lowest validation loss, among the epoch folders present (git keeps only that one)
epoch_of() { $PY - "$1" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = [json.loads(x) for x in (out / "val.jsonl").read_text().splitlines()]
best = min((r for r in rows if r["epoch"] >= 1 and float(r["epoch"]).is_integer()
            and (out / f"epoch-{int(r['epoch'])}").is_dir()), key=lambda r: (r["val_loss"], r["epoch"]))
print(out / f"epoch-{int(best['epoch'])}")
EOF
}

# 1. retrain from the training split, one run per empty share
for S in 0 0.1 0.25; do
  out=$R/sft-e$S
  finished "$out" && { log "sft-e$S done"; continue; }
  left_m=$(( $(left_s) / 60 ))
  m=$(( left_m - 40 ))  # the before/after and validation losses take about 25 min past the budget
  resume=""
  if [ -f "$out/checkpoint/trainer_state.pt" ] || [ -f "$out/checkpoint.old/trainer_state.pt" ]; then
    resume=--resume
  fi
  # A checkpoint (optimizer state, about 60 MB) is not kept in git, so it lives only as long as the session's
  # checkout: a fresh SFT starts only when the whole run (SFT_NEED minutes, its losses included) fits.
  if [ -n "$resume" ]; then
    [ "$m" -lt 20 ] && { log "stop: sft-e$S needs more time than is left"; exit 0; }
  elif [ "$left_m" -lt "${SFT_NEED:-150}" ]; then
    log "stop: sft-e$S needs about ${SFT_NEED:-150} min, $left_m left (start it at a session's beginning)"; exit 0
  fi
  log "sft-e$S start (--max-minutes $m $resume)"
  memrl train sft-membuilder --dataset locomo --split train --val-conv conv-44 --val-conv conv-48 \
      --expert annotations --lora-rank 16 --lr 2e-4 --epochs 2 --batch-size 8 --micro-batch 1 \
      --loss-examples 48 --save-every 5 --save-epochs --empty-share "$S" --output-dir "$out" \
      --max-minutes "$m" $resume
  finished "$out" || { log "stop: sft-e$S at its time budget (resumed next time)"; exit 0; }
  log "keep in git: $(epoch_of "$out") and $out/{sft_summary.json,sft_data.json,val.jsonl,metrics.jsonl} (not checkpoint*)"
done

# 2. choose on validation: each share's epoch of lowest validation loss (epoch_of), then the share of highest F1
run_eval "$R/val-raw" --dataset locomo --split validation --builder raw --provider local --top-k 10 --concurrency 8
for S in 0 0.1 0.25; do
  run_eval "$R/val-e$S" --dataset locomo --split validation --builder membuilder --provider local \
      --builder-model "$(epoch_of "$R/sft-e$S")" --top-k 10 --concurrency 8
done
[ -f "$R/val-table.json" ] || $PY -m bench.builders_table raw="$R/val-raw" e0="$R/val-e0" e0.1="$R/val-e0.1" \
    e0.25="$R/val-e0.25" --baseline raw --out "$R/val-table" > /dev/null
CHOSEN=$($PY - "$R" <<'EOF'
import json, sys
from pathlib import Path
R = Path(sys.argv[1])
rows = [t for t in json.loads((R / "val-table.json").read_text()) if t["builder"] != "raw"]
share = max(rows, key=lambda t: (t["overall"]["mean"], -float(t["builder"][1:])))["builder"][1:]
print(share)
EOF
)
ADAPTER=$(epoch_of "$R/sft-e$CHOSEN")
[ -f "$R/chosen.txt" ] || echo "share $CHOSEN, adapter $ADAPTER (val-table.json)" > "$R/chosen.txt"
log "chosen: $(cat "$R/chosen.txt")"

# 3. test once, raw's kept test run (today's search defaults) as the baseline
run_eval "$R/test-sft" --dataset locomo --split test --builder membuilder --provider local \
    --builder-model "$ADAPTER" --top-k 10 --concurrency 8
[ -f "$R/test-table.json" ] || $PY -m bench.builders_table raw="${RAW_TEST:-$R/../locomo-test-raw-0406}" \
    sft61="$R/test-sft" --baseline raw --out "$R/test-table" > /dev/null

# 4. LongMemEval part A, the same adapter and raw, once
run_eval "$R/lme-a-raw" --dataset longmemeval --data-path "$LME" --builder raw --provider local --top-k 10 \
    --concurrency 8
run_eval "$R/lme-a-sft" --dataset longmemeval --data-path "$LME" --builder membuilder --provider local \
    --builder-model "$ADAPTER" --top-k 10 --concurrency 8
[ -f "$R/lme-a-table.json" ] || $PY -m bench.builders_table raw="$R/lme-a-raw" sft61="$R/lme-a-sft" \
    --baseline raw --out "$R/lme-a-table" > /dev/null
log "q61 done"
