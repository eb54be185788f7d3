#!/usr/bin/env bash
# The "cannot help" set (#40 item 1) through ../workloads/gated.py, so that many more rounds fit
# one 10-minute device call than run.sh's runs one after another allow (a run there is 5-6 s
# of Python's and CUDA's start for 0.05-1.2 s of work): per program, the program as written
# (the reference, whose result every other run is checked against bit for bit) and hotpin's
# learning run, then ROUNDS rounds of as written, hotpin's first run and hotpin from the
# learned history, all started at once, each timed part run alone (gated.py's doc says how, and
# what changes against runs one at a time). Writes $OUT/online.jsonl (one line a run, with
# the reports' counters) and prints summarize.py's tables (medians, paired ratios and their
# intervals). run.sh's lines have each run's CPU time besides (`cpu_s`); these do not.
# Usage: BIN=dir OUT=dir bash bench/gpu/cannot_help/gated.sh ROUNDS [PROGRAMS...]
set -u
BIN=${BIN:-target/release}; OUT=${OUT:-/tmp/hotpin-cannot-help-gated}; PY=${PYTHON:-python3}
ROUNDS=${1:-12}; shift || true
PROGRAMS=${*:-loader_pageable loader_pinned compute small_copies small_allocs forks device_only}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
export XDG_STATE_HOME="$OUT/state"
PYTHON="$PY" PROGRAM_DIR="$HERE" python3 "$HERE/../workloads/gated.py" "$BIN" "$OUT" "$ROUNDS" \
  "${CONFIGS:-plain auto-first auto-history}" $(printf 'programs:%s ' $PROGRAMS) || exit
python3 "$HERE/summarize.py" "$OUT/online.jsonl" | tee "$OUT/table.md"
