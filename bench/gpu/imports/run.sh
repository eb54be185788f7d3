#!/usr/bin/env bash
# The popular stack imported under `hotpin run`, in every mode (#40 item 0): a crash on import
# (scikit-learn, and so transformers, died with SIGSEGV in the dynamic loader) is the worst
# harm hotpin can do. Each import runs as written, then under auto (a first run, writing its
# history), auto from that history, pin-all, pin-none and use (from the auto run's history);
# one line per run: import, mode, exit status, seconds. Then a Llama-shaped model from a
# config (random weights, nothing downloaded) under accelerate's cpu_offload, each mode,
# checked against the run as written.
# Usage: BIN=dir OUT=dir bash bench/gpu/imports/run.sh
set -u
BIN=${BIN:-target/release}
OUT=${OUT:-/tmp/hotpin-imports}
PY=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
export XDG_STATE_HOME="$OUT/state"
IMPORTS=(
  "import torch"
  "import numpy, scipy"
  "import sklearn, sklearn.metrics"
  "import pandas"
  "from transformers import AutoModelForCausalLM"
  "import accelerate"
  "import cupy"
  "import jax, jax.numpy"
)
one() { # LABEL MODE ARGS... -- CMD...
  local label=$1 mode=$2; shift 2
  local began=$EPOCHREALTIME
  timeout 300 "$@" >"$OUT/last.out" 2>"$OUT/last.err"
  local rc=$?
  local took=$(awk "BEGIN{print $EPOCHREALTIME - $began}")
  printf '%-48s %-13s exit %3d  %6.2f s\n' "$label" "$mode" "$rc" "$took"
  tail -1 "$OUT/last.out" | grep '^{' | sed 's/^/    /'
  [ "$rc" -ne 0 ] && tail -3 "$OUT/last.err" | sed 's/^/    /'
  return 0
}
for imp in "${IMPORTS[@]}"; do
  h="$OUT/$(echo "$imp" | tr -c 'a-z' _).hotpin"
  rm -f "$h"
  one "$imp" as-written "$PY" -c "$imp"
  one "$imp" auto "$BIN/hotpin" run --history "$h" -- "$PY" -c "$imp"
  one "$imp" auto-history "$BIN/hotpin" run --history "$h" -- "$PY" -c "$imp"
  one "$imp" pin-all "$BIN/hotpin" run --mode pin-all -- "$PY" -c "$imp"
  one "$imp" pin-none "$BIN/hotpin" run --mode pin-none -- "$PY" -c "$imp"
  [ -f "$h" ] && one "$imp" use "$BIN/hotpin" run --mode use --history "$h" -- "$PY" -c "$imp"
done
# accelerate's cpu_offload of a Llama-shaped model (bench/gpu/workloads/accelerate_offload.py):
# its output equal to the run as written, which saves it in $OUT/want.
p="$HERE/../workloads/accelerate_offload.py"; h="$OUT/offload_llama.hotpin"; rm -f "$h" "$OUT/want/accelerate_offload.pt"
export WANT_DIR="$OUT/want"
one offload_llama as-written "$PY" "$p"
one offload_llama by-hand env BY_HAND=1 "$PY" "$p"
one offload_llama auto "$BIN/hotpin" run --history "$h" -- "$PY" "$p"
one offload_llama auto-history "$BIN/hotpin" run --history "$h" -- "$PY" "$p"
one offload_llama pin-all "$BIN/hotpin" run --mode pin-all -- "$PY" "$p"
one offload_llama pin-none "$BIN/hotpin" run --mode pin-none -- "$PY" "$p"
