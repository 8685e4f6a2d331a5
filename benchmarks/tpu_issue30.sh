#!/usr/bin/env bash
# Issue 30's figures in one prepared call on a TPU machine, each part under its own time
# limit and written as it goes ($OUT/tpu/ or results/tpu/):
#   1. CartPole under max (the whole loop one pallas_call) next to JAX's best form at
#      N = 65,536 and 1,048,576 (benchmarks/tpu_whole_loop.py, ROWS, T1 seconds; whole_loop.json);
#   2. rigid_body alone with a longer limit (LIMIT_FIRST, default 110 s: JAX's own runs take
#      about 30 s of it), then the other rollouts (PROGRAMS) under STRATEGIES (default max),
#      LIMIT seconds each, in what is left of T_ALL (default 560) (rollouts.json, .png, .log).
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/tpu_env.sh
end=$((SECONDS + ${T_ALL:-560}))
log() { echo "== $(date +%T) [$SECONDS s] $*"; }
if [ "${T1:-120}" != 0 ]; then
  log "1/2 CartPole under max against JAX"
  timeout "${T1:-120}" "$PY" benchmarks/tpu_whole_loop.py --envs 65536,1048576 \
    --rows "${ROWS:-64}" --steps 200 --repeats 5 --out "$DEST/whole_loop.json" 2>&1 \
    | grep -v "^WARNING" | tail -20
fi
first=${FIRST:-rigid_body}
if [ -n "$first" ]; then
  log "2/2 $first"
  PROGRAMS=$first LIMIT=${LIMIT_FIRST:-110} T1=$((${LIMIT_FIRST:-110} + 20)) \
    STRATEGIES=${STRATEGIES:-max} bash benchmarks/tpu_rollouts.sh 2>&1 | grep -v "^WARNING" \
    | tail -8
fi
log "2/2 the other rollouts"
MERGE=${first:+1} PROGRAMS=${PROGRAMS:-} LIMIT=${LIMIT:-50} T1=$((end - SECONDS)) \
  STRATEGIES=${STRATEGIES:-max} bash benchmarks/tpu_rollouts.sh 2>&1 | grep -v "^WARNING" \
  | grep -v "^  File" | cut -c1-200 | tail -60
log done
