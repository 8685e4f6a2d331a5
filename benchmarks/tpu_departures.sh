#!/usr/bin/env bash
# Issue 29's last figure and issue 30's nested loop, one prepared call on a TPU machine,
# each part under its own time limit and written as it goes ($OUT/tpu/ or results/tpu/):
#   small:  PROGRAM (default grid_forage) at N = SMALL_N (1,024), T = SMALL_T (30): JAX on the
#           TPU and on the CPU, hlofuse under STRATEGIES (default max) on the TPU from both HLOs
#           (the CPU's up to CPU_HLO_LANES lanes), the interpreter (benchmarks/tpu_departure.py;
#           departure_PROGRAM_small.json)
#   ops:    integer and conversion ops in a Pallas kernel against XLA (tpu_int_ops.py)
#   nested: nested-loop constructs and implicit_pendulum's variants (tpu_nested_variants.py)
#   large:  PROGRAM at the bench's N = 65,536, T = 200, each result timed against JAX on the
#           TPU (departure_PROGRAM_large.json; JAX on the CPU up to JAX_CPU_LANES lanes)
#   walk:   PROGRAM at N = WALK_N (1,024), T = WALK_T (2) under WALK_STRATEGY (max) kernel by kernel
#           against the interpreter, and the first differing op of each differing kernel
#           (tpu_kernel_walk.py; kernel_walk_PROGRAM_N.json)
#   walkif: walk, only where part small found hlofuse departing from the interpreter
#   loops:  grid_forage under max with the position loop's settings (tpu_position_loops.py)
#   corpus: the corpus' CORPUS programs (default grid_forage) under CORPUS_STRATEGY (default
#           xla) and max against the interpreter (tpu_equality.py; equality_corpus.json)
# PARTS chooses (default small,ops,nested,large,corpus); T_ALL the whole call's seconds.
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/tpu_env.sh
end=$((SECONDS + ${T_ALL:-540}))
log() { echo "== $(date +%T) [$SECONDS s] $*"; }
# A part's limit: at most $1 and what is left, at least 1 s (`timeout 0` would not stop it).
left() { local l=$((end - SECONDS)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
clean() { grep -v "^WARNING" | grep -v "^  File" | cut -c1-400 | tail -${1:-40}; }
parts=,${PARTS:-small,ops,nested,large,corpus},
PROGRAM=${PROGRAM:-grid_forage}
STRATEGIES=${STRATEGIES:-max}
if [[ $parts == *,small,* ]]; then
  log "small: $PROGRAM at N = ${SMALL_N:-1024} under $STRATEGIES"
  timeout "$(left "${L_SMALL:-150}")" "$PY" benchmarks/tpu_departure.py --program "$PROGRAM" \
    --envs "${SMALL_N:-1024}" --steps "${SMALL_T:-30}" --repeats 0 --strategies "$STRATEGIES" \
    --cpu-hlo-lanes "${CPU_HLO_LANES:-4096}" --out "$DEST/departure_${PROGRAM}_small.json" \
    2>&1 | clean
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
  log "large: $PROGRAM at N = 65,536 under $STRATEGIES"
  timeout "$(left "${L_LARGE:-240}")" "$PY" benchmarks/tpu_departure.py --program "$PROGRAM" \
    --envs 65536 --steps 200 --strategies "$STRATEGIES" \
    --jax-cpu-lanes "${JAX_CPU_LANES:-1073741824}" --out "$DEST/departure_${PROGRAM}_large.json" \
    2>&1 | clean
fi
if [[ $parts == *,walkif,* ]] && "$PY" - "$DEST/departure_${PROGRAM}_small.json" <<'PY'
import json, sys
pairs = json.load(open(sys.argv[1]))["runs"][0]["pairs"]
sys.exit(0 if any("interpreter" in k and "hlofuse" in k and not v["equal"]
                  for k, v in pairs.items()) else 1)
PY
then
  parts=$parts,walk,
fi
if [[ $parts == *,walk,* ]]; then
  log "walk: $PROGRAM kernel by kernel"
  timeout "$(left "${L_WALK:-150}")" "$PY" benchmarks/tpu_kernel_walk.py --program "$PROGRAM" \
    --envs "${WALK_N:-1024}" --steps "${WALK_T:-2}" --strategy "${WALK_STRATEGY:-max}" \
    --out "$DEST/kernel_walk_${PROGRAM}_${WALK_N:-1024}.json" 2>&1 | clean
fi
if [[ $parts == *,loops,* ]]; then
  log "loops: $PROGRAM's position loop settings"
  timeout "$(left "${L_LOOPS:-200}")" "$PY" benchmarks/tpu_position_loops.py \
    --program "$PROGRAM" --settings "${SETTINGS:-rule:8,8:8,rule:1,32:8}" \
    --out "$DEST/position_loops.json" 2>&1 | clean
fi
if [[ $parts == *,corpus,* ]]; then
  corpus=${CORPUS:-$PROGRAM}
  log "corpus: $corpus under ${CORPUS_STRATEGY:-xla} and max against the interpreter"
  timeout "$(left "${L_CORPUS:-90}")" "$PY" benchmarks/tpu_equality.py --sets rollouts \
    --programs "$(echo "$corpus" | sed 's/,/.cpu.hlo,/g; s/$/.cpu.hlo/')" \
    --strategy "${CORPUS_STRATEGY:-xla}" \
    --out "$DEST/equality_corpus.json" 2>&1 | clean
fi
log done
ls -l "$DEST"
