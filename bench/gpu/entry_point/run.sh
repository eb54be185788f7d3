#!/usr/bin/env bash
# cudaGetDriverEntryPointByVersion on the GPU machine: profiled, then run in use mode; the
# interposer's report must show the two hot buffers kept pinned and the six cold ones demoted.
# Usage: BIN=dir OUT=dir bash bench/gpu/entry_point/run.sh
set -eu
BIN=${BIN:-target/release}
OUT=${OUT:-/tmp/hotpin-entry-point}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
nvcc -cudart shared "$HERE/entry_point.c" -lcuda -o "$OUT/entry_point"
"$BIN/hotpin" run --mode profile --history "$OUT/entry_point.hotpin" -- "$OUT/entry_point"
"$BIN/tracer" report "$OUT/entry_point.hotpin" | head -40
"$BIN/hotpin" run --mode use --history "$OUT/entry_point.hotpin" --report "$OUT/use" -- "$OUT/entry_point"
python3 - "$OUT" <<'PY'
import glob, json, sys
r = json.load(open(sorted(glob.glob(sys.argv[1] + "/use.*.json"))[0]))
print(json.dumps(r["counters"]))
for d in r["decisions"]:
    print(d["call"], d["site"], d["ordinal"], d["size"], d["action"], d["why"])
PY
