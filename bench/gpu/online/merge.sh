#!/usr/bin/env bash
# Merging runs against the latest alone (#29): varying.py runs train, train, eval (the odd
# one out, last) under auto mode, each writing what it learned; then a train run starts from
#   first    nothing (auto mode's first run)
#   latest   the eval run's history alone (what `--merge-runs 1` gives)
#   merged   the three merged (what `--merge-runs 3` gives: HOTPIN_MERGE)
# interleaved, ROUNDS rounds, each under --budget 128M (the train hot set). Lines in
# $OUT/merge.jsonl: the program's JSON, the config, the round, the interposer's counters.
# Usage: BIN=dir OUT=dir bash bench/gpu/online/merge.sh ROUNDS
set -u
BIN=$(cd "${BIN:-target/release}" && pwd)
OUT=${OUT:-/tmp/hotpin-merge}
ROUNDS=${1:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
: > "$OUT/merge.jsonl"
i=0
for mode in train train eval; do
  i=$((i + 1))
  "$BIN/hotpin" run --lease-socket off --history "$OUT/run$i.hotpin" -- \
    python3 "$HERE/varying.py" "$mode" > "$OUT/run$i.out" 2> "$OUT/run$i.err" || { cat "$OUT/run$i.err"; exit 1; }
done
for r in $(seq 1 "$ROUNDS"); do
  for config in first latest merged; do
    prefix="$OUT/$config.$r"
    merge=()
    case $config in
      first) rm -f "$prefix.hotpin" ;;
      latest) cp "$OUT/run3.hotpin" "$prefix.hotpin" ;;
      merged) cp "$OUT/run3.hotpin" "$prefix.hotpin"; merge=(env "HOTPIN_MERGE=$OUT/run2.hotpin:$OUT/run1.hotpin") ;;
    esac
    "${merge[@]}" "$BIN/hotpin" run --lease-socket off --budget 128M --history "$prefix.hotpin" \
      --report "$prefix" -- python3 "$HERE/varying.py" train > "$prefix.out" 2> "$prefix.err"
    python3 "$HERE/collect.py" "$prefix" "$config" "$r" \
      promoted promoted_bytes learned_pins evictions budget_refusals \
      peak_promoted_bytes \
      >> "$OUT/merge.jsonl"
  done
done
python3 - "$OUT/merge.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| start | seconds | pinned at birth | learned pins | evictions | mismatches |")
print("| --- | --- | --- | --- | --- | --- |")
for config in ["first", "latest", "merged"]:
    sel = [r for r in rows if r["config"] == config and "seconds" in r]
    med = lambda k: f"{statistics.median([r.get(k) or 0 for r in sel]):.3f}" if sel else "-"
    bad = sum(r.get("mismatches", 1) for r in rows if r["config"] == config)
    print(f"| {config} | {med('seconds')} | {med('promoted')} | {med('learned_pins')} | {med('evictions')} | {bad} |")
PY
