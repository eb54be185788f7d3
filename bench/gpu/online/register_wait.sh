#!/usr/bin/env bash
# The registration a program waits for (#26): register_wait.py (a GIB GiB pinned request
# copied whole, small round trips timed after each copy) as written, and under `hotpin run`
# with the request registered by the pinner thread in 64 MiB chunks, in 1 GiB
# chunks (the largest the setting allows), and by the program's own thread in one call
# (HOTPIN_OFF_THREAD_ABOVE=1T). Interleaved, ROUNDS rounds. Each run appends the program's
# JSON line, the config and the interposer's counters to $OUT/register-wait.jsonl.
# CONFIGS (default "as-written chunks-64M chunks-1G program-thread"): chunks-SIZE registers
# in chunks of SIZE.
# Usage: BIN=dir OUT=dir bash bench/gpu/online/register_wait.sh ROUNDS [GIB]
set -u
BIN=$(cd "${BIN:-target/release}" && pwd)
OUT=${OUT:-/tmp/hotpin-register-wait}
ROUNDS=${1:-3}
GIB=${2:-16}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
: > "$OUT/register-wait.jsonl"
for r in $(seq 1 "$ROUNDS"); do
  for config in ${CONFIGS:-as-written chunks-64M chunks-1G program-thread}; do
    prefix="$OUT/$config.$r"
    case $config in
      as-written) cmd=(python3 "$HERE/register_wait.py" "$GIB") ;;
      *)
        chunk=64M above=128M
        case $config in chunks-*) chunk=${config#chunks-} ;; esac
        [ "$config" = program-thread ] && above=1T
        cmd=(env HOTPIN_REGISTER_CHUNK=$chunk HOTPIN_OFF_THREAD_ABOVE=$above "$BIN/hotpin" run
             --lease-socket off --history "$prefix.hotpin" --report "$prefix" --
             python3 "$HERE/register_wait.py" "$GIB") ;;
    esac
    timeout 300 "${cmd[@]}" > "$prefix.out" 2> "$prefix.err"
    python3 "$HERE/collect.py" "$prefix" "$config" "$r" \
      longest_register_ns longest_thread_wait_ns off_thread_pins chunked_pins \
      copies_cut learned_pins learned_pin_bytes demoted register_failures \
      >> "$OUT/register-wait.jsonl"
  done
done
python3 - "$OUT/register-wait.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
configs = list(dict.fromkeys(r["config"] for r in rows))
print("| config | seconds | longest round trip ms | longest registration call ms | longest registration on a program thread ms | chunked pins | copies cut | mismatches |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for config in configs:
    sel = [r for r in rows if r["config"] == config and "seconds" in r]
    med = lambda k, scale=1: f"{statistics.median([(r.get(k) or 0) * scale for r in sel]):.3g}" if sel else "-"
    bad = sum(r.get("mismatches", 1) for r in rows if r["config"] == config)
    print(f"| {config} | {med('seconds')} | {med('longest_round_trip_ms')} | {med('longest_register_ns', 1e-6)} | "
          f"{med('longest_thread_wait_ns', 1e-6)} | {med('chunked_pins')} | {med('copies_cut')} | {bad} |")
PY
