#!/usr/bin/env bash
# Registration off the program's thread (#26): big_pin.py with a pinned request of GIB GiB
# copied whole COPIES times (served pageable, then pinned whole once its copies repay it),
# under `hotpin run` with the default HOTPIN_OFF_THREAD_ABOVE (128 MiB: the pinner thread
# registers it) and with 1 TiB (the copying thread registers it), interleaved, ROUNDS rounds.
# Each run appends the program's JSON line, the config and the interposer's counters to
# $OUT/offthread.jsonl.
# Usage: BIN=dir OUT=dir bash bench/gpu/online/offthread.sh ROUNDS [COPIES] [GIB]
set -u
BIN=$(cd "${BIN:-target/release}" && pwd)
OUT=${OUT:-/tmp/hotpin-offthread}
ROUNDS=${1:-3}
COPIES=${2:-10}
GIB=${3:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
: > "$OUT/offthread.jsonl"
for r in $(seq 1 "$ROUNDS"); do
  for config in pinner-thread copying-thread; do
    above=128M
    [ "$config" = copying-thread ] && above=1T
    prefix="$OUT/$config.$r"
    HOTPIN_OFF_THREAD_ABOVE=$above timeout 300 "$BIN/hotpin" run --lease-socket off \
      --history "$prefix.hotpin" --report "$prefix" -- \
      python3 "$HERE/big_pin.py" "$COPIES" "$GIB" "$((GIB * 1024))" > "$prefix.out" 2> "$prefix.err"
    python3 "$HERE/collect.py" "$prefix" "$config" "$r" \
      longest_register_ns longest_thread_wait_ns off_thread_pins learned_pins \
      learned_pin_bytes demoted register_failures \
      >> "$OUT/offthread.jsonl"
  done
done
python3 - "$OUT/offthread.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| config | seconds | alloc s | longest registration ms | longest program-thread wait ms | off-thread pins | mismatches |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for config in ["pinner-thread", "copying-thread"]:
    sel = [r for r in rows if r["config"] == config and "seconds" in r]
    med = lambda k, scale=1: f"{statistics.median([(r.get(k) or 0) * scale for r in sel]):.3f}" if sel else "-"
    print(f"| {config} | {med('seconds')} | {med('alloc_seconds')} | {med('longest_register_ns', 1e-6)} | "
          f"{med('longest_thread_wait_ns', 1e-6)} | {med('off_thread_pins')} | {sum(r.get('mismatches', 1) for r in rows if r['config'] == config)} |")
PY
