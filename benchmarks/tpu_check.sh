#!/usr/bin/env bash
# One prepared check for a machine with a TPU (issue 29's figures; each part under its own
# time limit, T0..T5 seconds, 0 skips a part; the defaults add up to 7.8 minutes; results
# written after each program or step):
#   0. the tests marked `tpu` (tests/tpu/test_chip*.py: the JAX corpus, CartPole's variants,
#      tiled reductions and in-place updates on the chip against the interpreter), with
#      pytest when it is importable (installed into /tmp/site with PIP_INDEX); pytest.txt;
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
#   4. the peers bench: JAX's own jit of the study's program on the same chip;
#   5. the rollout benchmark on the chip (benchmarks/tpu_rollouts.sh: xla, priority and max
#      beside JAX's jit; PROGRAMS chooses, default all, as far as T5 reaches).
# Writes results/tpu/*.json, or $OUT/tpu/ when OUT is set (the device machine's output folder).
# JAX (with jaxlib and libtpu) must be installed; hlofuse's other dependencies are installed
# into /tmp/site from the local index when PIP_INDEX is given.
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/tpu_env.sh
"$PY" -c "import jax; print(jax.__version__, jax.devices())" | tee "$DEST/device.txt"

if [ "${T0:-170}" != 0 ]; then
  echo "== 0/5 the tests marked tpu"
  if "$PY" -c "import pytest, hypothesis" 2>/dev/null; then
    timeout ${T0:-170} "$PY" -m pytest -p no:cacheprovider -o addopts="" -q -m tpu \
      tests/tpu/test_chip.py tests/tpu/test_chip_layouts.py 2>&1 | grep -v "^WARNING" \
      | tee "$DEST/pytest.txt" | tail -5
  else
    echo "tpu_check: pytest is not importable here; the tpu tests were not run" \
      | tee "$DEST/pytest.txt"
  fi
fi

if [ "${T1:-40}" != 0 ]; then
  echo "== 1/5 every corpus program on the chip against the interpreter"
  # A program past EQ_LIMIT seconds is recorded as timed out and the rest go on (exit 3).
  end=$((SECONDS + ${T1:-40}))
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
if [ "${T2:-30}" != 0 ]; then
  echo "== 2/5 launch cost and bandwidth"
  timeout ${T2:-30} "$PY" benchmarks/tpu_kernel_costs.py --out "$DEST/kernel_costs.json" \
    2>&1 | grep -v "^WARNING" | tail -20
  timeout ${T2:-30} "$PY" benchmarks/tpu_layouts.py --out "$DEST/layouts.json" \
    2>&1 | grep -v "^WARNING" | cut -c1-300 | tail -8
fi
if [ "${T3:-120}" != 0 ]; then
  echo "== 3/5 the CartPole study on the chip"
  T1=${T3:-120} bash benchmarks/tpu_study.sh
fi
if [ "${T4:-30}" != 0 ]; then
  echo "== 4/5 peers: JAX's own jit on the same chip"
  timeout ${T4:-30} "$PY" -m hlofuse.cli bench peers --envs 16384,1048576 --steps 200 \
    --budget 1 --peers jax-scan-split-u10,jax-scan-packed-u1 --out "$DEST" \
    || echo "tpu_check: peers did not finish"
fi
if [ "${T5:-45}" != 0 ]; then
  echo "== 5/5 the rollout benchmark on the chip"
  T1=${T5:-45} bash benchmarks/tpu_rollouts.sh | tail -5
fi
ls -l "$DEST"
