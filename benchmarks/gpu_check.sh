#!/usr/bin/env bash
# One prepared check for a machine with an NVIDIA GPU (under 5 minutes on an A100/H100):
#   1. every corpus program through the CUDA backend against JAX's recorded outputs;
#   2. the CartPole study on the GPU at N = 1024, 16384, 262144 (checked against the reference
#      interpreter at the smallest N, as the CPU study is);
#   3. the peers bench: the hand-written CUDA kernel against the C kernel and hlofuse max on
#      the CPU (and JAX on the GPU where jax[cuda] is installed).
# Writes results/gpu/*.json. Budget: 120 + 140 + 50 s of timeouts.
# Needs nvcc (CUDA 12 or later) and a driver; ARCH picks the target (default: the device's).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
HLOFUSE=${HLOFUSE:-.venv/bin/hlofuse}
OUT=results/gpu
mkdir -p "$OUT"

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no GPU (nvidia-smi finds none); nothing measured" >&2
  exit 2
fi
nvidia-smi -L | tee "$OUT/device.txt"
if [ -z "${ARCH:-}" ]; then
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
  ARCH="sm_${cap}"
fi
echo "gpu_check: target $ARCH"

echo "== 1/3 corpus on the GPU (about 1 minute: nvcc per program)"
timeout 120 "$PY" benchmarks/gpu_corpus.py --arch "$ARCH" --out "$OUT/corpus.json" || true

echo "== 2/3 the CartPole study on the GPU"
timeout 140 "$HLOFUSE" cartpole --backend cuda --envs 1024,16384,262144 --steps 200 \
  --repeats 3 --variants baseline,fused-rng,split-state,unroll10,all,max \
  --out "$OUT" || echo "gpu_check: the study did not finish (see above)"

echo "== 3/3 peers: the hand-written CUDA kernel (studies/peers/cartpole_kernel.cu), the C"
echo "   kernel and hlofuse max on the CPU, and JAX's scan where it sees the GPU"
# The study's `max` row on the GPU (step 2) is the figure to compare with `cuda` here.
peers=cuda,c,hlofuse-max
if "$PY" -c "import jax; assert jax.devices('gpu')" >/dev/null 2>&1; then
  peers="$peers,jax-scan-split-u10"
else
  echo "gpu_check: no JAX with a GPU; the JAX peer is left out"
fi
HLOFUSE_CUDA_ARCH="$ARCH" timeout 50 "$HLOFUSE" bench peers --envs 1024,16384 \
  --budget 1 --peers "$peers" --out "$OUT" || echo "gpu_check: peers did not finish"

# The model's prediction needs no GPU (hlofuse cartpole --predict a100|h100 --envs 16384 on
# any machine); it is left out here to keep the check under five minutes.
ls -l "$OUT"
