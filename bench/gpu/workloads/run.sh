#!/usr/bin/env bash
# The workloads of this folder on the GPU machine, one command, within one 10-minute device
# call: gated.py runs each program first as written (the reference: every later run is checked
# bit for bit against what it computed) and hotpin's learning run, then ROUNDS rounds with the
# configurations interleaved: as written, by hand (BY_HAND=1), hotpin's first run, hotpin from
# the history the learning run wrote, and hotpin with --budget = the bytes the program pins by
# hand. The processes of a group start together and each runs its timed part alone
# (gated.py's doc says how and why). Writes $OUT/online.jsonl (one line a run), $OUT/table.md
# and $OUT/summary.json (table.py); render the chart with
# `cargo xtask bench-chart $OUT/summary.json docs/img/workloads.png`.
# Usage: BIN=dir OUT=dir bash bench/gpu/workloads/run.sh ROUNDS [WORKLOADS...]
#   WORKLOADS default: accelerate_offload diffusers_offload optimizer_offload kv_swap
#   module_to dataloader_pageable.
#   CONFIGS overrides the configurations (gated.py's names: e.g. "plain by-hand auto-history
#   auto-history-at-birth auto-history-first-copy" to weigh HOTPIN_AT_FIRST_COPY=0 and
#   HOTPIN_AHEAD=0 against the default).
set -u
BIN=${BIN:-target/release}; OUT=${OUT:-/tmp/hotpin-workloads}; PY=${PYTHON:-python3}
ROUNDS=${1:-3}; shift || true
WORKLOADS=${*:-accelerate_offload diffusers_offload optimizer_offload kv_swap module_to dataloader_pageable}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
PYTHON="$PY" python3 "$HERE/gated.py" "$BIN" "$OUT" "$ROUNDS" \
  "${CONFIGS:-plain by-hand auto-first auto-history budget}" $WORKLOADS || exit
python3 "$HERE/table.py" "$OUT/online.jsonl" "$OUT/summary.json" | tee "$OUT/table.md"
