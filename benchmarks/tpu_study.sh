#!/usr/bin/env bash
# The CartPole study on a TPU one step at a time (benchmarks/tpu_study.py): ENVS (default
# 16384,1048576), VARIANTS (default every step, baseline first), LIMIT (seconds per step,
# default 150), T1 (seconds in all, default 540); MERGE=1 adds to the study.json already in
# DEST. A step past LIMIT is recorded as timed out and the rest go on in a fresh process.
# Writes $OUT/tpu/study.json and study.log (or results/tpu/).
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/tpu_env.sh
end=$((SECONDS + ${T1:-540}))
merge=${MERGE:+--merge}
status=1
while [ $SECONDS -lt $end ]; do
  timeout $((end - SECONDS)) "$PY" benchmarks/tpu_study.py --envs "${ENVS:-16384,1048576}" \
    --steps 200 --repeats 3 ${VARIANTS:+--variants "$VARIANTS"} --limit "${LIMIT:-150}" \
    $merge --out "$DEST/study.json" 2>&1 | grep -v "^WARNING" | tee -a "$DEST/study.log"
  status=${PIPESTATUS[0]}
  [ $status -eq 3 ] || break
  merge=--merge
done
[ $status -eq 0 ] || echo "tpu_study: stopped before every step was measured"
