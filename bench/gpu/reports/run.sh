#!/usr/bin/env bash
# The report by default (#42) on the GPU machine: a plain `tracer record` (no flags) of four
# unmodified programs of bench/gpu/online, each report's text and HTML written to $OUT; then
# the cost of the default recording (Python lines of mappings included) against the same with
# --no-python-lines and the program alone, ROUNDS rounds interleaved on torch_loop.py.
# Usage: BIN=dir OUT=dir bash bench/gpu/reports/run.sh [ROUNDS]
set -u
BIN=${BIN:-target/release}; OUT=${OUT:-/tmp/hotpin-reports}; PY=${PYTHON:-python3}
ROUNDS=${1:-3}
HERE=$(cd "$(dirname "$0")/.." && pwd)/online
mkdir -p "$OUT"; export PYTHONUNBUFFERED=1
for p in torch_loop over_pinned cupy_numpy offload; do
  "$BIN/tracer" record -o "$OUT/$p.hotpin" -- "$PY" "$HERE/$p.py" >"$OUT/$p.out" 2>"$OUT/$p.err"
  echo "$p: exit $? $(tail -1 "$OUT/$p.out" | cut -c1-160)"
  "$BIN/tracer" report "$OUT/$p.hotpin" >"$OUT/$p.txt" 2>>"$OUT/$p.err"
  "$BIN/tracer" report --html "$OUT/$p.html" "$OUT/$p.hotpin" >/dev/null 2>>"$OUT/$p.err"
  head -1 "$OUT/$p.txt"
done
J="$OUT/cost.jsonl"; : >"$J"
one() { # config round cmd...
  local c=$1 r=$2; shift 2
  local began=$EPOCHREALTIME
  local line; line=$("$@" 2>/dev/null | grep '^{' | tail -1)
  local wall; wall=$(awk "BEGIN{print $EPOCHREALTIME - $began}")
  echo "${line:-{\}}" | python3 -c "import json,sys; d=json.loads(sys.stdin.read() or '{}'); print(json.dumps({'config':'$c','round':$r,'wall':$wall,'seconds':d.get('seconds'),'mismatches':d.get('mismatches')}))" >>"$J"
}
for r in $(seq 1 "$ROUNDS"); do
  one plain "$r" "$PY" "$HERE/torch_loop.py"
  one record "$r" "$BIN/tracer" record -o "$OUT/cost.hotpin" -- "$PY" "$HERE/torch_loop.py"
  one record-no-lines "$r" "$BIN/tracer" record --no-python-lines -o "$OUT/cost2.hotpin" -- "$PY" "$HERE/torch_loop.py"
done
python3 - "$J" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for c in ["plain", "record", "record-no-lines"]:
    w = sorted(r["wall"] for r in rows if r["config"] == c)
    s = sorted(r["seconds"] for r in rows if r["config"] == c and r["seconds"] is not None)
    bad = sum(1 for r in rows if r["config"] == c and r["mismatches"] != 0)
    print(f"{c}: wall median {statistics.median(w):.2f} ({w[0]:.2f}-{w[-1]:.2f}) s; "
          f"program seconds median {statistics.median(s) if s else float('nan'):.3f}; wrong {bad}")
PY
