#!/usr/bin/env bash
# One prepared check for a machine with a TPU (issue 29's figures; each part under its own
# time limit, T1..T4 seconds, 0 skips a part; results written after each program or step):
#   1. every corpus program on the chip against the reference interpreter
#      (benchmarks/tpu_equality.py: largest relative difference, within rtol 1e-5 or not, how
#      its kernels ran; SETS chooses the corpora, EQ_PROGRAMS the files (default all),
#      EQ_STRATEGY the strategy (default xla; rollouts also under max), EQ_LIMIT seconds per
#      program, MERGE=1 goes on from the equality.json already in DEST);
#   2. kernel launch cost and the bandwidth of the largest element-wise kernel
#      (benchmarks/tpu_kernel_costs.py: chains of kernels in one program), then the tiled
#      reductions' bandwidth and the in-place row updates (benchmarks/tpu_layouts.py);
#   3. the CartPole study on the chip at N = 16384 and 1048576, one step at a time, each
#      checked against the reference interpreter at N = 64 (benchmarks/tpu_study.sh);
#   4. the peers bench: JAX's own jit of the study's program on the same chip.
# Writes results/tpu/*.json, or $OUT/tpu/ when OUT is set (the device machine's output folder).
# JAX (with jaxlib and libtpu) must be installed; hlofuse's other dependencies are installed
# into /tmp/site from the local index when PIP_INDEX is given.
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/tpu_env.sh
"$PY" -c "import jax; print(jax.__version__, jax.devices())" | tee "$DEST/device.txt"

if [ "${T1:-150}" != 0 ]; then
  echo "== 1/4 every corpus program on the chip against the interpreter"
  # A program past EQ_LIMIT seconds is recorded as timed out and the rest go on (exit 3).
  end=$((SECONDS + ${T1:-150}))
  merge=${MERGE:+--merge}
  while [ $SECONDS -lt $end ]; do
    timeout $((end - SECONDS)) "$PY" benchmarks/tpu_equality.py \
      --sets "${SETS:-jax,indexing,linalg,rollouts}" --limit "${EQ_LIMIT:-60}" $merge \
      --strategy "${EQ_STRATEGY:-xla}" --programs "${EQ_PROGRAMS:-}" \
      --out "$DEST/equality.json" 2>&1 | grep -v "^WARNING" | cut -c1-400 | tail -40
    [ "${PIPESTATUS[0]}" -eq 3 ] || break
    merge=--merge
  done
fi
if [ "${T2:-100}" != 0 ]; then
  echo "== 2/4 launch cost and bandwidth"
  timeout ${T2:-100} "$PY" benchmarks/tpu_kernel_costs.py --out "$DEST/kernel_costs.json" \
    2>&1 | grep -v "^WARNING" | tail -20
  timeout ${T2:-100} "$PY" benchmarks/tpu_layouts.py --out "$DEST/layouts.json" \
    2>&1 | grep -v "^WARNING" | cut -c1-300 | tail -8
fi
if [ "${T3:-300}" != 0 ]; then
  echo "== 3/4 the CartPole study on the chip"
  T1=${T3:-300} bash benchmarks/tpu_study.sh
fi
[ "${T4:-60}" != 0 ] || exit 0
echo "== 4/4 peers: JAX's own jit on the same chip"
timeout ${T4:-60} "$PY" -m hlofuse.cli bench peers --envs 16384,1048576 --steps 200 --budget 1 \
  --peers jax-scan-split-u10,jax-scan-packed-u1 --out "$DEST" \
  || echo "tpu_check: peers did not finish"
ls -l "$DEST"
