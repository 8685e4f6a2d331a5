#!/usr/bin/env bash
# What the study on the chip still missed at N = 1,048,576 (issue 29), one prepared call,
# each part under its own time limit and written as it goes ($OUT/tpu/ or results/tpu/):
#   1. split-state (study_split.json; where a program does not return,
#      benchmarks/tpu_hang.py --bisect finds the kernel);
#   2. unroll10 (study_unroll10.json);
#   3. none, its compile timed apart from its runs (phase_seconds; study_none.json): a
#      program whose compile fails on the chip has its kernels compiled one at a time, and
#      the log says so (stderr) with the time it took;
#   4. the equality sweep for the rollouts the earlier sweeps did not reach (EQ_PROGRAMS),
#      each under xla and max (equality_rollouts_rest.json), in what time is left of T_ALL
#      seconds (default 560); MERGE=1 goes on from that file.
# PARTS chooses the parts (default split,unroll10,none,equality). Each step's per-kernel
# profile stops after P_LIMIT seconds (default 45; the step is still timed, its record's
# profile_notes say the kernel counts are partial).
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/tpu_env.sh
end=$((SECONDS + ${T_ALL:-560}))
log() { echo "== $(date +%T) [$SECONDS s] $*"; }
study() {  # out-name limit args...
  local out=$1 limit=$2
  shift 2
  timeout $((limit + 15)) "$PY" benchmarks/tpu_study.py --envs "${ENVS:-1048576}" --repeats 3 \
    --limit "$limit" --profile-limit "${P_LIMIT:-45}" --out "$DEST/$out" "$@" 2>&1 \
    | grep -v "^WARNING" | cut -c1-300 | tail -30
}
parts=,${PARTS:-split,unroll10,none,equality},
if [[ $parts == *,split,* ]]; then
  log "1/4 split-state"
  study study_split.json "${L_SPLIT:-70}" --variants split-state --steps 200
fi
if [[ $parts == *,unroll10,* ]]; then
  log "2/4 unroll10"
  study study_unroll10.json "${L_UNROLL:-120}" --variants unroll10 --steps 200
fi
if [[ $parts == *,none,* ]]; then
  log "3/4 none"
  study study_none.json "${L_NONE:-200}" --variants none --steps 200
fi
[[ $parts == *,equality,* ]] || end=0
programs=${EQ_PROGRAMS:-implicit_pendulum,inventory_logged,jacobi_rope,mountain_car,mountain_car_continuous,mountain_car_mlp,particles,pendulum_mlp,reacher_logged,rigid_body,spring_chain,grid_forage}
merge=${MERGE:+--merge}
while [ $((end - SECONDS)) -gt 20 ]; do
  log "4/4 equality of the other rollouts under xla and max"
  timeout $((end - SECONDS)) "$PY" benchmarks/tpu_equality.py --sets rollouts \
    --limit "${EQ_LIMIT:-45}" $merge --strategy xla --programs "$(echo "$programs" \
    | sed 's/,/.cpu.hlo,/g; s/$/.cpu.hlo/')" --out "$DEST/equality_rollouts_rest.json" 2>&1 \
    | grep -v "^WARNING" | cut -c1-300 | tail -25
  [ "${PIPESTATUS[0]}" -eq 3 ] || break
  merge=--merge
done
log done
ls -l "$DEST"
