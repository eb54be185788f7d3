#!/usr/bin/env bash
# What `tracer record` adds to a Python program's allocations, on the CUDA stand-in (a test
# fixture, not CUDA: this measures CPU costs): bench/gpu/python/alloc_cost.py with the
# stand-in's runtime (no PyTorch), untraced and under each tracer
# binary given, ROUNDS rounds interleaved. Each line: the round, the configuration, the
# tracer's own CPU ticks (utime + stime, 1/100 s, sampled until it exits) and the program's
# JSON line. Needs root (the tracer) and kernel.bpf_stats_enabled=1 for bpf_ns_per_alloc.
# Usage: STANDIN=folder-of-libcudart.so.13 bash bench/standin/tracer_alloc_cost.sh ROUNDS N TRACER...
set -u
STANDIN=${STANDIN:?the folder of the stand-in runtime}
ROUNDS=${1:-5}; N=${2:-20000}; shift 2
PROGRAM=$(cd "$(dirname "$0")/../gpu/python" && pwd)/alloc_cost.py
OUT=$(mktemp -d)
sysctl -qw kernel.bpf_stats_enabled=1
for r in $(seq 1 "$ROUNDS"); do
  echo "$r untraced - $(LD_LIBRARY_PATH=$STANDIN python3 "$PROGRAM" "$N" "$STANDIN/libcudart.so.13" | tail -1)"
  for tracer in "$@"; do
    LD_LIBRARY_PATH=$STANDIN "$tracer" record -o "$OUT/h.hotpin" -- \
      python3 "$PROGRAM" "$N" "$STANDIN/libcudart.so.13" >"$OUT/out" 2>/dev/null &
    t=$! last=""
    while kill -0 $t 2>/dev/null; do
      l=$(awk '{print $14 + $15}' /proc/$t/stat 2>/dev/null); [ -n "$l" ] && last=$l; sleep 0.1
    done
    echo "$r $tracer $last $(tail -1 "$OUT/out")"
  done
done
rm -rf "$OUT"
