#!/usr/bin/env bash
# The registration a program waits for (#26): register_wait.py (a GIB GiB pinned request
# copied whole, small round trips timed after each copy) as written, and under `hotpin run`
# with the request registered by the pinner thread in 64 MiB chunks, in 1 GiB
# chunks (the largest the setting allows), and by the program's own thread in one call
# (HOTPIN_OFF_THREAD_ABOVE=1T). Interleaved, ROUNDS rounds. Each run appends the program's
# JSON line, the config and the interposer's counters to $OUT/register-wait.jsonl.
# CONFIGS (default "as-written chunks-64M chunks-1G program-thread"): chunks-SIZE registers
# in chunks of SIZE; budget runs with `--budget GIBG` (the big block alone fits) in hotpin's
# default chunks (budget-chunks-SIZE: in chunks of SIZE), budget-program-thread the same with the big block registered, and let go,
# in one call on the copying thread; a config ending in -turns runs with the pinner's calls
# and the program's large copies taking turns (HOTPIN_BETWEEN_COPIES=1; -no-turns: =0). HOT_MIB (default 0) adds the program's last phase: a hot
# tensor of HOT_MIB MiB that, under the budget, displaces the big block. BIG_PAGEABLE=1 makes
# the big tensor pageable (pinned by hotpin hidden from the program).
# Usage: BIN=dir OUT=dir [HOT_MIB=256] bash bench/gpu/online/register_wait.sh ROUNDS [GIB]
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
      as-written) cmd=(python3 "$HERE/register_wait.py" "$GIB" 4 1.5 "${HOT_MIB:-0}") ;;
      *)
        chunk=64M above=128M budget=() turns=()
        case $config in
          *-no-turns) turns=(HOTPIN_BETWEEN_COPIES=0) config_base=${config%-no-turns} ;;
          *-turns) turns=(HOTPIN_BETWEEN_COPIES=1) config_base=${config%-turns} ;;
          *) config_base=$config ;;
        esac
        case $config_base in chunks-*) chunk=${config_base#chunks-} ;; budget*) chunk=32M budget=(--budget "${GIB}G") ;; esac
        case $config_base in budget-chunks-*) chunk=${config_base#budget-chunks-} ;; esac
        case $config_base in *program-thread) above=1T ;; esac
        cmd=(env HOTPIN_REGISTER_CHUNK=$chunk HOTPIN_OFF_THREAD_ABOVE=$above ${turns[@]+"${turns[@]}"} "$BIN/hotpin" run
             --lease-socket off --history "$prefix.hotpin" --report "$prefix" "${budget[@]}" --
             python3 "$HERE/register_wait.py" "$GIB" 4 1.5 "${HOT_MIB:-0}") ;;
    esac
    timeout 300 "${cmd[@]}" > "$prefix.out" 2> "$prefix.err"
    python3 "$HERE/collect.py" "$prefix" "$config" "$r" \
      longest_register_ns longest_thread_wait_ns off_thread_pins chunked_pins \
      copies_cut learned_pins learned_pin_bytes demoted register_failures \
      evictions off_thread_unpins longest_thread_unpin_ns longest_unregister_ns \
      longest_copy_held_ns longest_turn_wait_ns calls_beside_copies \
      >> "$OUT/register-wait.jsonl"
  done
done
python3 - "$OUT/register-wait.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
configs = list(dict.fromkeys(r["config"] for r in rows))
print("| config | seconds | longest round trip ms | longest registration call ms | longest registration on a program thread ms | chunked pins | copies cut | evictions (off thread) | longest unpin on a program thread ms | hot copy ms, median / longest | longest round trip while evicting ms | longest unregistration call ms | longest copy held ms | calls beside copies | mismatches |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for config in configs:
    sel = [r for r in rows if r["config"] == config and "seconds" in r]
    med = lambda k, scale=1: f"{statistics.median([(r.get(k) or 0) * scale for r in sel]):.3g}" if sel else "-"
    bad = sum(r.get("mismatches", 1) for r in rows if r["config"] == config)
    print(f"| {config} | {med('seconds')} | {med('longest_round_trip_ms')} | {med('longest_register_ns', 1e-6)} | "
          f"{med('longest_thread_wait_ns', 1e-6)} | {med('chunked_pins')} | {med('copies_cut')} | "
          f"{med('evictions')} ({med('off_thread_unpins')}) | {med('longest_thread_unpin_ns', 1e-6)} | "
          f"{med('median_hot_copy_ms')} / {med('longest_hot_copy_ms')} | {med('longest_evict_round_trip_ms')} | {med('longest_unregister_ns', 1e-6)} | "
          f"{med('longest_copy_held_ns', 1e-6)} | {med('calls_beside_copies')} | {bad} |")
PY
