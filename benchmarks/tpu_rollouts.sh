#!/usr/bin/env bash
# The rollout corpus on a TPU (`bench rollouts --backend tpu`, one program at a time, the JSON
# rewritten after each): STRATEGIES (default xla,priority,max), PROGRAMS (default all), LANES
# (default 65536), T1 (seconds, default 540); MERGE=1 adds to the rollouts.json already in
# DEST. Writes $OUT/tpu/rollouts.json, .png and .log (or results/tpu/): the log keeps the
# progress lines when the whole call is stopped.
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/tpu_env.sh
# A program past LIMIT seconds (default 90) is recorded as timed out and the rest go on in a
# fresh process (exit 3).
end=$((SECONDS + ${T1:-540}))
merge=${MERGE:+--merge}
while [ $SECONDS -lt $end ]; do
  timeout $((end - SECONDS)) "$PY" benchmarks/tpu_rollouts.py --lanes "${LANES:-65536}" \
    --steps 200 --repeats 3 --strategies "${STRATEGIES:-xla,priority,max}" \
    --programs "${PROGRAMS:-}" --limit "${LIMIT:-90}" $merge ${merge:+--rest} \
    --out "$DEST/rollouts.json" 2>&1 | tee -a "$DEST/rollouts.log"
  status=${PIPESTATUS[0]}
  [ $status -eq 3 ] || break
  merge=--merge
done
[ ${status:-1} -eq 0 ] || echo "tpu_rollouts: stopped before every program was measured"
ls -l "$DEST"
