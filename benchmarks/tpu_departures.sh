#!/usr/bin/env bash
# Issue 29's last figure and issue 30's nested loop, one prepared call on a TPU machine,
# each part under its own time limit and written as it goes ($OUT/tpu/ or results/tpu/):
#   small:  grid_forage at N = 1,024, T = 30: JAX on the TPU and on the CPU, hlofuse max on the
#           TPU from both HLOs, the interpreter (benchmarks/tpu_departure.py; departure_small.json)
#   ops:    integer and conversion ops in a Pallas kernel against XLA (tpu_int_ops.py)
#   nested: nested-loop constructs and implicit_pendulum's variants (tpu_nested_variants.py)
#   large:  grid_forage at the bench's N = 65,536, T = 200, timed (departure_large.json)
#   walk:   grid_forage at N = 1,024, T = 2 kernel by kernel against the interpreter, and
#           the first differing op of each differing kernel (tpu_kernel_walk.py)
#   loops:  grid_forage under max with the position loop's settings (tpu_position_loops.py)
#   corpus: the corpus' CORPUS programs (default grid_forage) under xla and max against the
#           interpreter (tpu_equality.py; equality_corpus.json)
# PARTS chooses (default small,ops,nested,large,corpus); T_ALL the whole call's seconds.
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/tpu_env.sh
end=$((SECONDS + ${T_ALL:-540}))
log() { echo "== $(date +%T) [$SECONDS s] $*"; }
left() { local l=$((end - SECONDS)); [ "$l" -gt "$1" ] && echo "$1" || echo "$l"; }
clean() { grep -v "^WARNING" | grep -v "^  File" | cut -c1-400 | tail -${1:-40}; }
parts=,${PARTS:-small,ops,nested,large,corpus},
PROGRAM=${PROGRAM:-grid_forage}
if [[ $parts == *,small,* ]]; then
  log "small: $PROGRAM at N = 1,024"
  timeout "$(left "${L_SMALL:-150}")" "$PY" benchmarks/tpu_departure.py --program "$PROGRAM" \
    --envs 1024 --steps 30 --repeats 0 --out "$DEST/departure_small.json" 2>&1 | clean
fi
if [[ $parts == *,ops,* ]]; then
  log "ops"
  timeout "$(left "${L_OPS:-60}")" "$PY" benchmarks/tpu_int_ops.py --out "$DEST/int_ops.json" \
    2>&1 | clean
fi
if [[ $parts == *,nested,* ]]; then
  log "nested"
  timeout "$(left "${L_NESTED:-150}")" "$PY" benchmarks/tpu_nested_variants.py \
    --out "$DEST/nested_variants.json" 2>&1 | clean
fi
if [[ $parts == *,large,* ]]; then
  log "large: $PROGRAM at N = 65,536"
  timeout "$(left "${L_LARGE:-240}")" "$PY" benchmarks/tpu_departure.py --program "$PROGRAM" \
    --envs 65536 --steps 200 --out "$DEST/departure_large.json" 2>&1 | clean
fi
if [[ $parts == *,walk,* ]]; then
  log "walk: $PROGRAM kernel by kernel"
  timeout "$(left "${L_WALK:-150}")" "$PY" benchmarks/tpu_kernel_walk.py --program "$PROGRAM" \
    --envs 1024 --steps 2 --out "$DEST/kernel_walk.json" 2>&1 | clean
fi
if [[ $parts == *,loops,* ]]; then
  log "loops: $PROGRAM's position loop settings"
  timeout "$(left "${L_LOOPS:-200}")" "$PY" benchmarks/tpu_position_loops.py \
    --program "$PROGRAM" --settings "${SETTINGS:-rule:8,8:8,rule:1,32:8}" \
    --out "$DEST/position_loops.json" 2>&1 | clean
fi
if [[ $parts == *,corpus,* ]]; then
  corpus=${CORPUS:-$PROGRAM}
  log "corpus: $corpus under xla and max against the interpreter"
  timeout "$(left "${L_CORPUS:-90}")" "$PY" benchmarks/tpu_equality.py --sets rollouts \
    --programs "$(echo "$corpus" | sed 's/,/.cpu.hlo,/g; s/$/.cpu.hlo/')" --strategy xla \
    --out "$DEST/equality_corpus.json" 2>&1 | clean
fi
log done
ls -l "$DEST"
