#!/usr/bin/env bash
# Where loader_pageable's time goes under hotpin (#40 item 1): the DataLoader program as
# written, with the interposer loaded but no mode (LD_PRELOAD alone), `hotpin run` in
# pin-none, auto (first run), auto with a floor no allocation reaches, and auto without
# the lease client; then the same loader without workers, as written and auto. ROUNDS
# rounds interleaved; one JSON line per run (with the program's own breakdown: until the
# first batch, waiting, copying, model) to $OUT/loader_diag.jsonl, medians printed.
# Usage: BIN=dir OUT=dir bash bench/gpu/cannot_help/loader_diag.sh ROUNDS
set -u
BIN=$(cd "${BIN:-target/release}" && pwd); OUT=${OUT:-/tmp/hotpin-loader-diag}; PY=${PYTHON:-python3}
ROUNDS=${1:-5}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"; export XDG_STATE_HOME="$OUT/state" PYTHONUNBUFFERED=1
J="$OUT/loader_diag.jsonl"; : >"$J"
one() { # program config round cmd...
  local p=$1 c=$2 r=$3; shift 3
  local line; line=$(timeout 120 "$@" 2>>"$OUT/err.log" | tail -1); local rc=$?
  echo "${line:-{\}}" | python3 -c "
import json, sys
d = json.loads(sys.stdin.read() or '{}')
d.update(program='$p', config='$c', round=$r, exit=$rc)
print(json.dumps(d))" >>"$J"
}
H=("$BIN/hotpin" run --history "$OUT/first.hotpin")
for r in $(seq 1 "$ROUNDS"); do
  p=loader_pageable
  one $p plain "$r" "$PY" "$HERE/programs.py" $p
  one $p preload-only "$r" env LD_PRELOAD="$BIN/libhotpin_preload.so" "$PY" "$HERE/programs.py" $p
  one $p pin-none "$r" "${H[@]}" --mode pin-none -- "$PY" "$HERE/programs.py" $p
  rm -f "$OUT/first.hotpin"; one $p auto-first "$r" "${H[@]}" -- "$PY" "$HERE/programs.py" $p
  rm -f "$OUT/first.hotpin"; one $p auto-floor "$r" "${H[@]}" --floor 100G -- "$PY" "$HERE/programs.py" $p
  rm -f "$OUT/first.hotpin"; one $p auto-nolease "$r" "${H[@]}" --lease-socket off -- "$PY" "$HERE/programs.py" $p
  p=loader_inline
  one $p plain "$r" "$PY" "$HERE/programs.py" $p
  rm -f "$OUT/first.hotpin"; one $p auto-first "$r" "${H[@]}" -- "$PY" "$HERE/programs.py" $p
done
python3 - "$J" <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    d = json.loads(line)
    ok = d.get("exit") == 0 and d.get("mismatches") == 0
    runs[(d["program"], d["config"])].append(d if ok else None)
keys = ["seconds", "first_batch", "waiting", "copying", "model"]
print("| program | config | runs ok | " + " | ".join(keys) + " |")
print("| --- | --- | --- |" + " --- |" * len(keys))
for (p, c), ds in runs.items():
    good = [d for d in ds if d]
    cells = [f"{statistics.median(d[k] for d in good):.3f}" if good else "-" for k in keys]
    print(f"| {p} | {c} | {len(good)}/{len(ds)} | " + " | ".join(cells) + " |")
PY
