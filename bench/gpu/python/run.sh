#!/usr/bin/env bash
# Python lines in reports (#28), on the GPU machine: writes where this interpreter keeps the
# fields hotpin reads (layout_check.py; the tracer-agent test
# `the_layout_table_matches_a_live_interpreter` compares them with the table), then runs unmodified programs of
# bench/gpu/online under `hotpin run` (auto mode, a first run each), writes the `tracer
# report` of what each learned to $OUT/PROGRAM.report.txt, and the cost of reading the Python
# stacks (the interposer's python_stack_ns / python_stacks) to $OUT/cost.jsonl.
# Usage: BIN=dir OUT=dir bash bench/gpu/python/run.sh [PROGRAMS...]
set -u
BIN=$(cd "${BIN:-target/release}" && pwd)
OUT=${OUT:-/tmp/hotpin-python}
PROGRAMS=${*:-torch_loop over_pinned cupy_numpy jax_loop}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
python3 "$HERE/layout_check.py" > "$OUT/layout.json" || exit 1
: > "$OUT/cost.jsonl"
for p in $PROGRAMS; do
  rm -f "$OUT/$p.hotpin" "$OUT/$p".*.json
  timeout 300 "$BIN/hotpin" run --lease-socket off --history "$OUT/$p.hotpin" --report "$OUT/$p" -- \
    python3 "$HERE/../online/$p.py" > "$OUT/$p.out" 2> "$OUT/$p.err"
  echo "$p: exit $?, $(tail -1 "$OUT/$p.out" | cut -c1-200)"
  if [ -s "$OUT/$p.hotpin" ]; then
    "$BIN/tracer" report "$OUT/$p.hotpin" > "$OUT/$p.report.txt" 2>&1
  else
    echo "(no history written: $(tail -2 "$OUT/$p.err"))" > "$OUT/$p.report.txt"
  fi
  python3 - "$OUT" "$p" >> "$OUT/cost.jsonl" <<'PY'
import glob, json, sys
out, p = sys.argv[1:]
stacks = ns = most = 0
for path in glob.glob(f"{out}/{p}.*.json"):
    c = json.load(open(path))["counters"]
    stacks += c.get("python_stacks", 0)
    ns += c.get("python_stack_ns", 0)
    most = max(most, c.get("python_stack_max_ns", 0))
line = json.loads(open(f"{out}/{p}.out").read().strip().splitlines()[-1]) if open(f"{out}/{p}.out").read().strip() else {}
print(json.dumps({"program": p, "python_stacks": stacks, "python_stack_ns": ns,
                  "mean_us": ns / stacks / 1000 if stacks else None,
                  "max_us": most / 1000,
                  "mean_without_the_longest_us": (ns - most) / (stacks - 1) / 1000 if stacks > 1 else None,
                  "checks": line.get("checks"), "mismatches": line.get("mismatches")}))
PY
done
cat "$OUT/cost.jsonl"
