#!/usr/bin/env bash
# The workloads of this folder on the GPU machine, one command: each program first as written
# once (it saves what it computed in $OUT/want: every later run of it is checked bit for bit
# against that), then bench/gpu/online/run.sh over them, ROUNDS rounds with the configurations
# interleaved: as written, by hand (BY_HAND=1), hotpin's first run, hotpin from the history a
# first run learned, and hotpin with --budget = the by-hand run's pinned bytes. Writes
# $OUT/online.jsonl (one line a run), $OUT/table.md and $OUT/summary.json (table.py); render
# the chart with `cargo xtask bench-chart $OUT/summary.json docs/img/workloads.png`.
# Usage: BIN=dir OUT=dir bash bench/gpu/workloads/run.sh ROUNDS [WORKLOADS...]
#   WORKLOADS default: accelerate_offload diffusers_offload optimizer_offload kv_swap
#   module_to dataloader_pageable. About 90 s a workload at 3 rounds on an H200.
#   CONFIGS overrides the configurations (online/run.sh's names: e.g. "plain by-hand
#   auto-history auto-history-at-birth" to weigh HOTPIN_AT_FIRST_COPY=0 against the default).
set -u
BIN=${BIN:-target/release}; OUT=${OUT:-/tmp/hotpin-workloads}; PY=${PYTHON:-python3}
ROUNDS=${1:-3}; shift || true
WORKLOADS=${*:-accelerate_offload diffusers_offload optimizer_offload kv_swap module_to dataloader_pageable}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
export WANT_DIR="$OUT/want" PYTHONUNBUFFERED=1
for p in $WORKLOADS; do
  rm -f "$WANT_DIR/$p.pt"
  "$PY" "$HERE/$p.py" >"$OUT/$p.reference.out" 2>"$OUT/$p.reference.err"
  echo "$p: as written, the reference: exit $? $(tail -1 "$OUT/$p.reference.out" | cut -c1-200)" >&2
done
PROGRAM_DIR="$HERE" CONFIGS="${CONFIGS:-plain by-hand auto-first auto-history budget}" SKIP_PROFILE=1 \
  BIN="$BIN" OUT="$OUT" PYTHON="$PY" bash "$HERE/../online/run.sh" "$ROUNDS" $WORKLOADS >/dev/null
python3 "$HERE/table.py" "$OUT/online.jsonl" "$OUT/summary.json" | tee "$OUT/table.md"
