#!/usr/bin/env bash
# PyTorch loop slowdown, traced vs untraced phases alternating within one process: even
# phases run with no tracer at all, odd ones with `tracer --pid` attached.
# Usage: BIN=dir OUT=dir bench/gpu/loop_ab.sh PHASES STEPS
set -u
BIN=${BIN:-.device/bin}; OUT=${OUT:-/tmp/hotpin-out}
PHASES=${1:-10}; STEPS=${2:-400}
CTL=$(mktemp -d); HERE=$(dirname "$0")
export PYTHONUNBUFFERED=1
python3 "$HERE/torch_loop_ab.py" "$PHASES" "$STEPS" "$CTL" > "$OUT/loop_ab.json" &
PY=$!
for phase in $(seq 0 $((PHASES - 1))); do
  while [ ! -e "$CTL/ready-$phase" ]; do sleep 0.01; done
  if [ -n "${TRACER:-}" ]; then  # the previous phase was traced: end that recording first
    kill -INT "$TRACER"; wait "$TRACER"; TRACER=
  fi
  if [ $((phase % 2)) -eq 1 ]; then
    "$BIN/tracer" --pid "$PY" -o "$CTL/h$phase.hotpin" 2> "$CTL/tracer$phase.err" &
    TRACER=$!
    until grep -q "probes attached" "$CTL/tracer$phase.err" 2>/dev/null; do sleep 0.01; done
  fi
  touch "$CTL/go-$phase"
done
wait "$PY"
[ -n "${TRACER:-}" ] && { kill -INT "$TRACER"; wait "$TRACER"; }
cat "$OUT/loop_ab.json"
grep -h "CUDA calls" "$CTL"/tracer*.err
