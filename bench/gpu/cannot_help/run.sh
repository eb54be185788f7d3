#!/usr/bin/env bash
# The "cannot help" set (#40 item 1) on the GPU machine: each program as written, under
# `hotpin run` on its first run, and from its own history, ROUNDS rounds interleaved (the
# order reversed every other round). Writes
# one JSON line per run to $OUT/cannot_help.jsonl and prints medians (summarize.py). Each
# hotpin run writes its report under $OUT/r; the line gets `busy_ns`, the time the program's
# threads spent inside hotpin's own work (the report's counter, summed over its processes),
# `counters` (every nonzero counter of the reports, summed; peaks and maxima the largest),
# and `cpu_s`, the CPU seconds of the run's whole process tree (../cpu_time.py).
# Usage: BIN=dir OUT=dir bash bench/gpu/cannot_help/run.sh ROUNDS [PROGRAMS...]
set -u
BIN=${BIN:-target/release}; OUT=${OUT:-/tmp/hotpin-cannot-help}; PY=${PYTHON:-python3}
ROUNDS=${1:-5}; shift || true
PROGRAMS=${*:-loader_pageable loader_pinned compute small_copies small_allocs forks device_only}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT/r"; export XDG_STATE_HOME="$OUT/state" PYTHONUNBUFFERED=1
J="$OUT/cannot_help.jsonl"; : >"$J"
one() { # program config round cmd...
  local p=$1 c=$2 r=$3; shift 3
  local began=$EPOCHREALTIME
  rm -f "$OUT/cpu"
  # pipefail: the run's exit status, not tail's (before, a failed run read as exit 0).
  local line rc; line=$(set -o pipefail; timeout 120 "$PY" "$HERE/../cpu_time.py" "$OUT/cpu" "$@" 2>"$OUT/last.err" | tail -1); rc=$?
  local wall=$(awk "BEGIN{print $EPOCHREALTIME - $began}")
  [ -z "$line" ] && line='{}'
  echo "$line" | python3 -c "
import glob, json, sys
d = json.loads(sys.stdin.read() or '{}')
reports = [json.load(open(f)) for f in glob.glob('$OUT/r/$p.$c.$r.*.json')]
if reports:
    d['busy_ns'] = sum(x['counters']['busy_ns'] for x in reports)
    d['busy_entries'] = sum(x['counters']['busy_entries'] for x in reports)
    # Every counter, summed over the processes (the largest, for peaks and maxima): where the
    # time inside hotpin goes (python_stack_ns, ...), without the reports.
    summed = {}
    for x in reports:
        for k, v in x['counters'].items():
            if isinstance(v, (int, float)):
                summed[k] = max(summed.get(k, 0), v) if ('peak' in k or 'max' in k) else summed.get(k, 0) + v
    d['counters'] = {k: v for k, v in summed.items() if v}
    d['processes'] = len(reports)
try:
    d['cpu_s'] = float(open('$OUT/cpu').read())
except (OSError, ValueError):
    pass
d.update(program='$p', config='$c', round=$r, wall=$wall, exit=$rc)
print(json.dumps(d))" >>"$J"
}
config() { # program config round
  local p=$1 c=$2 r=$3
  case $c in
    plain) one "$p" plain "$r" "$PY" "$HERE/programs.py" "$p" ;;
    auto-first)
      rm -f "$OUT/$p.first.hotpin"
      one "$p" auto-first "$r" "$BIN/hotpin" run --history "$OUT/$p.first.hotpin" --report "$OUT/r/$p.auto-first.$r" -- "$PY" "$HERE/programs.py" "$p" ;;
    auto-history)
      cp "$OUT/$p.hotpin" "$OUT/$p.history.hotpin" 2>/dev/null || rm -f "$OUT/$p.history.hotpin"
      one "$p" auto-history "$r" "$BIN/hotpin" run --history "$OUT/$p.history.hotpin" --report "$OUT/r/$p.auto-history.$r" -- "$PY" "$HERE/programs.py" "$p" ;;
  esac
}
for r in $(seq 1 "$ROUNDS"); do
  for p in $PROGRAMS; do
    h="$OUT/$p.hotpin"
    [ "$r" = 1 ] && rm -f "$h" && one "$p" learn 0 "$BIN/hotpin" run --history "$h" --report "$OUT/r/$p.learn.0" -- "$PY" "$HERE/programs.py" "$p"
    # Odd rounds as written first, even rounds last: a run's place in the round (a machine
    # that speeds up or slows down within a round) counts against neither side.
    order="plain auto-first auto-history"
    [ $((r % 2)) = 0 ] && order="auto-history auto-first plain"
    for c in $order; do config "$p" "$c" "$r"; done
  done
done
python3 "$HERE/summarize.py" "$J"
