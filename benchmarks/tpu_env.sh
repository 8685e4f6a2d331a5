# Sourced by the prepared TPU runs (tpu_check.sh, tpu_whole_loop.sh), from the repository
# root: PY, DEST (results/tpu, or $OUT/tpu on the device machine, created), hlofuse's other
# dependencies installed into /tmp/site from the local index when PIP_INDEX is given, the
# import path, hlofuse's cache, and exit status 2 when JAX finds no TPU.
PY=${PY:-python3}
DEST=${OUT:+$OUT/tpu}
DEST=${DEST:-results/tpu}
mkdir -p "$DEST"
if [ -n "${PIP_INDEX:-}" ] && [ ! -d /tmp/site/rich ]; then
  PIP_CONFIG_FILE=/dev/null "$PY" -m pip install --isolated -q --only-binary=:all: \
    --index-url "$PIP_INDEX" --target /tmp/site rich matplotlib pytest hypothesis
fi
export PYTHONPATH=${PYTHONPATH:-}:/tmp/site:$PWD/src:$PWD
export HLOFUSE_CACHE_DIR=${HLOFUSE_CACHE_DIR:-/tmp/hlofuse-cache}
if ! "$PY" -c "import jax; assert jax.devices('tpu')" >/dev/null 2>&1; then
  echo "$(basename "$0"): no TPU (jax.devices('tpu') finds none); nothing measured" >&2
  exit 2
fi
