#!/usr/bin/env bash
# What hotpin adds to a fork (#40 item 1): forks.c (THREADS idle threads, MIB MiB touched,
# FORKS forks) as written, with the interposer loaded and no mode, under `hotpin run --mode
# pin-none` and under auto mode's first run; ROUNDS rounds interleaved, the order reversed in
# even rounds. Prints each configuration's median microseconds a fork (over rounds of
# per-run medians) and its paired ratio to as written.
# Usage: BIN=dir bash bench/standin/forks.sh ROUNDS [THREADS MIB FORKS]
set -u
BIN=$(cd "${BIN:-target/release}" && pwd) || exit; ROUNDS=${1:-10}
for f in hotpin libhotpin_preload.so; do
  [ -e "$BIN/$f" ] || { echo "forks.sh: no $f in $BIN (cargo build --release -p preload)" >&2; exit 1; }
done
ARGS=("${2:-16}" "${3:-256}" "${4:-200}")
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cc -O2 -pthread -o "$T/forks" "$(dirname "$0")/forks.c" || exit
CONFIGS=(plain interposer-alone pin-none auto)
for r in $(seq 1 "$ROUNDS"); do
  order=("${CONFIGS[@]}")
  [ $((r % 2)) = 0 ] && for ((i = ${#CONFIGS[@]} - 1, k = 0; i >= 0; i--, k++)); do order[k]=${CONFIGS[i]}; done
  for c in "${order[@]}"; do
    case $c in
      plain) o=$("$T/forks" "${ARGS[@]}") ;;
      interposer-alone) o=$(LD_PRELOAD="$BIN/libhotpin_preload.so" "$T/forks" "${ARGS[@]}") ;;
      pin-none) o=$("$BIN/hotpin" run --mode pin-none -- "$T/forks" "${ARGS[@]}") ;;
      auto) rm -f "$T/h.hotpin"; o=$("$BIN/hotpin" run --history "$T/h.hotpin" -- "$T/forks" "${ARGS[@]}") ;;
    esac || { echo "forks.sh: $c round $r failed (exit $?)" >&2; exit 1; }
    echo "$c $r $o"
  done
done >"$T/runs.txt"
python3 - "$T/runs.txt" <<'PY'
import collections, json, statistics, sys
d = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    c, r, o = line.split(" ", 2)
    j = json.loads(o)
    if j["mismatches"]:
        sys.exit(f"forks.sh: {c} round {r}: {j['mismatches']} children exited wrong")
    d[c][int(r)] = j
print("| configuration | threads | mappings | µs a fork (median, range) | paired x |")
print("| --- | --- | --- | --- | --- |")
for c, rs in d.items():
    v = [j["fork_us"] for j in rs.values()]
    paired = [j["fork_us"] / d["plain"][r]["fork_us"] for r, j in rs.items()]
    threads = max(j["threads"] for j in rs.values())
    maps = max(j["maps"] for j in rs.values())
    print(f"| {c} | {threads} | {maps} | {statistics.median(v):.0f} ({min(v):.0f}-{max(v):.0f}) | {statistics.median(paired):.3f} |")
PY
