#!/usr/bin/env bash
# What hotpin's hooks cost a program it cannot help (#40 item 1), on the CUDA stand-in (a test
# fixture, not CUDA: copies are memcpy, so this measures the CPU time hotpin adds around each
# call, not transfers). Each phase of hook_cost.c as written, under `hotpin run --mode
# pin-none`, auto mode on a first run, and auto mode from its history, ROUNDS rounds
# interleaved; each run timed by the program, every copy checked, and the report's busy_ns
# (the time the program's threads spent inside hotpin) read. Prints medians, ns a call. With
# BASE=dir (another build's hotpin), its first and from-history runs are interleaved too.
# Usage: STANDIN=folder-of-libcudart.so.13 BIN=dir [BASE=dir] bash bench/standin/hook_cost.sh [ROUNDS] [N]
set -euo pipefail
BIN=${BIN:-target/release}; BASE=${BASE:-}; STANDIN=${STANDIN:?the folder of the stand-in runtime}
ROUNDS=${1:-7}; N=${2:-100000}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$(mktemp -d)}; mkdir -p "$OUT/r"
cc -O2 -o "$OUT/hook_cost" "$HERE/hook_cost.c" -L"$STANDIN" -l:libcudart.so.13 -Wl,-rpath,"$STANDIN"
export XDG_STATE_HOME="$OUT/state" LD_LIBRARY_PATH="$STANDIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
J="$OUT/hook_cost.jsonl"; : >"$J"
one() { # phase config round cmd...
  local p=$1 c=$2 r=$3; shift 3
  local line; line=$("$@" "$OUT/hook_cost" "$p" "$N" 2>"$OUT/last.err" | tail -1)
  echo "$line" | python3 -c "
import glob, json, sys
d = json.loads(sys.stdin.read())
reports = [json.load(open(f)) for f in glob.glob('$OUT/r/$p.$c.$r.*.json')]
d['busy_ns'] = sum(x['counters']['busy_ns'] for x in reports) if reports else None
d.update(config='$c', round=$r)
print(json.dumps(d))" >>"$J"
}
for p in copies async async_scalar allocs large beside scalar questions; do
  "$BIN/hotpin" run --history "$OUT/$p.learned.hotpin" -- "$OUT/hook_cost" "$p" "$N" >/dev/null
done
auto_runs() { # phase round label bin: auto mode's first run, then from the learned history
  local p=$1 r=$2 c=$3 bin=$4
  rm -f "$OUT/first.hotpin"
  one "$p" "$c-first" "$r" "$bin/hotpin" run --history "$OUT/first.hotpin" --report "$OUT/r/$p.$c-first.$r" --
  # A run that learned nothing writes no history: then this is a first run again.
  cp "$OUT/$p.learned.hotpin" "$OUT/history.hotpin" 2>/dev/null || rm -f "$OUT/history.hotpin"
  one "$p" "$c-history" "$r" "$bin/hotpin" run --history "$OUT/history.hotpin" --report "$OUT/r/$p.$c-history.$r" --
}
for r in $(seq 1 "$ROUNDS"); do
  for p in copies async async_scalar allocs large beside scalar questions; do
    one "$p" plain "$r" env
    one "$p" pin-none "$r" "$BIN/hotpin" run --mode pin-none --report "$OUT/r/$p.pin-none.$r" --
    auto_runs "$p" "$r" auto "$BIN"
    [ -z "$BASE" ] || auto_runs "$p" "$r" base "$BASE"
  done
done
python3 - "$J" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
phases = {"copies": "16 KiB copies, untracked", "async": "16 KiB async copies and a stream sync, untracked", "allocs": "2 MiB malloc and free", "large": "16 KiB copies of a tracked 64 MiB block", "beside": "16 KiB copies, untracked, beside a tracked block", "scalar": "16 KiB copies, untracked, after a pinned request of 4 bytes", "async_scalar": "16 KiB async copies and a stream sync, untracked, after a pinned request of 4 bytes", "questions": "cudaPointerGetAttributes of 16 KiB buffers, untracked"}
configs = [c for c in ["plain", "pin-none", "auto-first", "auto-history", "base-first", "base-history"] if any(r["config"] == c for r in rows)]
print("ns a call, median (range) of the program's own timing; `inside` is the report's busy_ns a call")
print("| phase | " + " | ".join(configs) + " | inside hotpin: " + " / ".join(configs[1:]) + " | wrong |")
print("| --- | " + " | ".join("---" for _ in configs) + " | --- | --- |")
for p, name in phases.items():
    cell, inside = [], []
    base = statistics.median(r["seconds"] / r["calls"] for r in rows if r["phase"] == p and r["config"] == "plain")
    for c in configs:
        xs = [r["seconds"] / r["calls"] * 1e9 for r in rows if r["phase"] == p and r["config"] == c]
        m = statistics.median(xs)
        cell.append(f"{m:.0f} ({min(xs):.0f}-{max(xs):.0f})" + ("" if c == "plain" else f", +{m - base * 1e9:.0f}"))
        b = [r["busy_ns"] / r["calls"] for r in rows if r["phase"] == p and r["config"] == c and r["busy_ns"] is not None]
        if b:
            inside.append(f"{statistics.median(b):.0f}")
    wrong = sum(r["mismatches"] for r in rows if r["phase"] == p)
    print(f"| {name} | " + " | ".join(cell) + f" | {' / '.join(inside)} | {wrong} |")
PY
