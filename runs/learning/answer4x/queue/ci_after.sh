#!/usr/bin/env bash
# After q4 (pid $1): the CI command from a fresh clone of main, only if it can end before $DEADLINE.
while kill -0 "$1" 2>/dev/null; do sleep 20; done
echo "$(date -u +%FT%TZ) q4 ended"
if [ $(( $(date +%s) + 2100 )) -lt "$DEADLINE" ]; then
  rm -rf /work/fresh && git clone -q /work/main /work/fresh && cd /work/fresh && git log --oneline -1
  echo "$(date -u +%FT%TZ) ci start"; timeout 2400 bash .ci/run > /work/fresh-ci.log 2>&1; echo "$(date -u +%FT%TZ) ci rc $?"
else
  echo "$(date -u +%FT%TZ) ci not started: too late"
fi
