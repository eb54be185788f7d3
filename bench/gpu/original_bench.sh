#!/usr/bin/env bash
# The original design's benchmark: for each buffer size, 2 hot buffers (175 round trips each)
# and 25 cold ones (one round trip), in four configurations, alternating within each run:
#   unpinned (malloc), pinned (cudaMallocHost for every buffer), profile (hotpin pinning
#   everything while `tracer` records), use (hotpin pinning what that run's profile found hot).
# Each line of $OUT/bench.jsonl is one transfer-bench summary plus the config and run number.
# Usage: BIN=dir OUT=dir CUDART=lib bench/gpu/original_bench.sh "1M 4M 16M" RUNS
set -u
BIN=${BIN:-target/release}
OUT=${OUT:-/tmp/hotpin-bench}
CUDART=${CUDART:-/usr/local/cuda/targets/x86_64-linux/lib/libcudart.so.13}
SIZES=${1:-"1M 4M 16M 64M 256M"}
RUNS=${2:-5}
W=$(mktemp -d)
mkdir -p "$OUT"
common=(--cudart "$CUDART" --hot 2 --transfers 175 --cold 25)
emit() { # config run json
  python3 -c "import json,sys; d=json.loads(sys.argv[3]); d['config']=sys.argv[1]; d['run']=int(sys.argv[2]); print(json.dumps(d))" "$1" "$2" "$3" >> "$OUT/bench.jsonl"
}
for size in $SIZES; do
  for run in $(seq "$RUNS"); do
    emit unpinned "$run" "$("$BIN/transfer-bench" "${common[@]}" --size "$size" --mode unpinned)"
    emit pinned "$run" "$("$BIN/transfer-bench" "${common[@]}" --size "$size" --mode pinned)"
    emit profile "$run" "$("$BIN/tracer" record -o "$W/h.hotpin" -- "$BIN/transfer-bench" "${common[@]}" --size "$size" --mode profile 2>>"$OUT/tracer.err")"
    emit use "$run" "$("$BIN/transfer-bench" "${common[@]}" --size "$size" --mode use --history "$W/h.hotpin")"
    echo "size $size run $run done"
  done
done
