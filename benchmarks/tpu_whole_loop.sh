#!/usr/bin/env bash
# One prepared run on a TPU machine (about 6 minutes on one v5e chip): CartPole under max
# (the whole loop one pallas_call) next to JAX's best form at N = 65,536 and 1,048,576 with
# two block sizes, then three rollouts under max next to JAX's jit. Writes $OUT/tpu/ (or
# results/tpu/): whole_loop.json, rollouts.json.
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/tpu_env.sh
timeout ${T1:-250} "$PY" benchmarks/tpu_whole_loop.py --envs 65536,1048576 \
  --rows ${ROWS:-32,64} --steps 200 --repeats 5 --out "$DEST/whole_loop.json" \
  || echo "tpu_whole_loop: CartPole did not finish"
timeout ${T2:-110} "$PY" - "$DEST/rollouts.json" <<'PYEOF' || echo "tpu_whole_loop: rollouts did not finish"
import sys
from pathlib import Path
from hlofuse.studies.rollouts_bench import RolloutsConfig, run_rollouts, write_json
config = RolloutsConfig(lanes=65536, steps=200, repeats=3,
                        names=("mountain_car", "pendulum", "acrobot"),
                        strategies=("max",), backend="tpu")
write_json(run_rollouts(config, progress=lambda s: print(s, flush=True)), Path(sys.argv[1]))
PYEOF
ls -l "$DEST"
