#!/usr/bin/env bash
# One prepared check for a machine with a TPU (the tests, the kernels and the peers take about
# 4 minutes; the study's groups up to 2 minutes each: set ENVS and GROUPS to fit the time):
#   1. the `tpu` tests (tests/tpu/test_chip.py): corpus and CartPole on the chip equal to the
#      reference interpreter;
#   2. kernel launch overhead and the bandwidth of the largest element-wise kernel;
#   3. the CartPole study on the chip at N = 16384 and at 1048576 (each checked against the
#      reference interpreter at N = 64), with kernels and bytes per step;
#   4. the peers bench: JAX's own jit of the study's program on the same chip.
# Writes results/tpu/*.json, or $OUT/tpu/ when OUT is set (the device machine's output folder).
# JAX (with jaxlib and libtpu) must be installed; hlofuse's other dependencies are installed
# into /tmp/site from the local index when PIP_INDEX is given.
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/tpu_env.sh
"$PY" -c "import jax; print(jax.__version__, jax.devices())" | tee "$DEST/device.txt"

echo "== 1/4 the tpu tests (CartPole's steps and the JAX corpus on the chip)"
timeout ${T1:-150} "$PY" -m pytest tests/tpu/test_chip.py -m tpu -q -p no:cacheprovider \
  --junitxml="$DEST/tests.xml" 2>&1 | tail -30

echo "== 2/4 launch cost and bandwidth"
timeout ${T2:-45} "$PY" benchmarks/tpu_kernels.py --out "$DEST/kernels.json" | tail -30

# The study in small groups of steps, each with baseline (its speedups are over it), so that
# what finishes is written when a later group runs out of time: every step compiles its
# program at N = 64 (the check) and at N, and each kernel alone for the profile, and the
# unrolled steps have ten times the kernels. `none` (one kernel per instruction: hundreds of
# Mosaic compiles) is left out. JAX's persistent cache (in HLOFUSE_CACHE_DIR) keeps every
# compile, so baseline and the N = 64 checks compile once.
echo "== 3/4 the CartPole study on the chip"
for n in ${ENVS:-16384 1048576}; do
  for group in ${GROUPS:-max fused-rng,split-state relaxed-concat,priority unroll10 all}; do
    dest="$DEST/study-$n-${group//,/-}"
    mkdir -p "$dest"
    timeout ${T3:-120} "$PY" -m hlofuse.cli cartpole --backend tpu --envs "$n" --steps 200 \
      --repeats 3 --variants "$group" --out "$dest" > "$dest.log" 2>&1 \
      || echo "tpu_check: the study of $group at N=$n did not finish"
    grep -E "^[│|] " "$dest.log" | head -20
  done
done

echo "== 4/4 peers: JAX's own jit on the same chip"
timeout ${T4:-60} "$PY" -m hlofuse.cli bench peers --envs 16384,1048576 --steps 200 --budget 1 \
  --peers jax-scan-split-u10,jax-scan-packed-u1 --out "$DEST" \
  || echo "tpu_check: peers did not finish"
ls -l "$DEST"
