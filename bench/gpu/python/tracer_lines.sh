#!/usr/bin/env bash
# Python lines read by the tracer (#28), on the GPU machine with real PyTorch:
# 1. layout_check.py -> $OUT/layout.json: where this Python keeps each field (compared with
#    tracer-common's table here: HOTPIN_LAYOUT_JSON=... cargo test -p tracer-agent layout);
# 2. torch_lines.py under `tracer record --libc-malloc --` and by `--pid` after its set-up;
#    check_lines.py compares each history with the program's own truth -> $OUT/lines.jsonl;
# 3. the cost: alloc_cost.py (pinned blocks from cudaMallocHost) untraced, traced with
#    Python lines and traced without, ROUNDS rounds interleaved -> $OUT/cost.jsonl.
# PARTS="layout lines cost" (the default) picks which.
# Usage: BIN=dir OUT=dir bash bench/gpu/python/tracer_lines.sh
set -u
BIN=$(cd "${BIN:-.device/bin}" && pwd)
OUT=${OUT:-/tmp/tracer-lines}
W=${W:-/tmp/tracer-lines-work}
ROUNDS=${ROUNDS:-3}
PARTS=${PARTS:-"layout lines cost"}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT" "$W"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
: > "$OUT/lines.jsonl"
: > "$OUT/cost.jsonl"
case " $PARTS " in *" layout "*) python3 "$HERE/layout_check.py" > "$OUT/layout.json" ;; esac

# Waits (at most 60 s) until FILE has a line matching PATTERN.
wait_for() { # file pattern
  for _ in $(seq 600); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "tracer_lines.sh: no '$2' in $1" >&2; return 1
}

for mode in record pid; do
  case " $PARTS " in *" lines "*) ;; *) continue ;; esac
  h=$W/$mode.json
  rm -f "$h" "$W/go"
  if [ $mode = record ]; then
    "$BIN/tracer" record --libc-malloc -o "$h" -- python3 "$HERE/torch_lines.py" \
      > "$W/$mode.out" 2> "$W/$mode.err"
  else
    HOTPIN_GO=$W/go python3 "$HERE/torch_lines.py" > "$W/$mode.out" 2> "$W/$mode.err" &
    program=$!
    wait_for "$W/$mode.err" READY
    "$BIN/tracer" record --libc-malloc --pid $program -o "$h" 2> "$W/$mode.tracer" &
    tracer=$!
    wait_for "$W/$mode.tracer" "tracer: recording"
    touch "$W/go"
    wait $program
    wait $tracer
  fi
  python3 "$HERE/check_lines.py" "$h" "$W/$mode.out" $mode >> "$OUT/lines.jsonl" \
    || tail -5 "$W/$mode.err" "$W/$mode.tracer" 2>/dev/null | cut -c1-300
  "$BIN/tracer" report "$h" > "$OUT/$mode.report.txt" 2>&1
done

case " $PARTS " in *" cost "*) sysctl -qw kernel.bpf_stats_enabled=1 ;; *) ROUNDS=0 ;; esac
for round in $(seq "$ROUNDS"); do
  for how in untraced lines no-lines; do
    case $how in
      untraced) line=$(python3 "$HERE/alloc_cost.py" 2> /dev/null | tail -1) ;;
      lines) line=$("$BIN/tracer" record -o "$W/cost.hotpin" -- \
               python3 "$HERE/alloc_cost.py" 2> "$W/cost.err" | tail -1) ;;
      no-lines) line=$("$BIN/tracer" record --no-python-lines -o "$W/cost.hotpin" -- \
               python3 "$HERE/alloc_cost.py" 2> "$W/cost.err" | tail -1) ;;
    esac
    echo "{\"round\": $round, \"how\": \"$how\", \"result\": $line}" | tee -a "$OUT/cost.jsonl"
  done
done
cat "$OUT/lines.jsonl"
