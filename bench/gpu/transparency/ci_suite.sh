#!/usr/bin/env bash
# The CI transparency suite (preload/tests/c/transparency/*.c) on a real GPU: each program
# built with nvcc against the real CUDA headers, run plain, then under `hotpin run` in every
# mode (profile, use from that profile, pin-all, pin-none), ROUNDS times. One line per run:
# program, config, round, exit status, checks, mismatches, and whether the program's answers
# (its details, less where libc put its blocks) equal the plain run's of that round.
# Usage: BIN=dir OUT=dir bash bench/gpu/transparency/ci_suite.sh [ROUNDS]
set -u
BIN=${BIN:-target/release}; OUT=${OUT:-/tmp/hotpin-ci-suite}; ROUNDS=${1:-1}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
SRC=$(cd "$(dirname "$0")/../../../preload/tests/c/transparency" && pwd)
mkdir -p "$OUT"
PROGRAMS="h2d_reuse d2h_read free_reuse cache_handoff pinned_queries mapped_capture threads forked"
for p in $PROGRAMS; do
  "$NVCC" -O1 -x cu -cudart shared -Xcompiler -pthread -o "$OUT/$p" "$SRC/$p.c" -lcuda || exit 1
done
line() { # program config round status stdout-file plain-file
  python3 - "$@" <<'PY'
import json, sys
p, config, rnd, rc, out, plain = sys.argv[1:7]
def verdict(path):
    lines = [l for l in open(path, errors="replace") if l.startswith("{")]
    return json.loads(lines[-1]) if lines else {}
def answers(v):
    d = dict(v.get("details", {})); d.pop("next_allocation_was_freed_block", None); return d
v, base = verdict(out), verdict(plain)
print(json.dumps({"program": p, "config": config, "round": int(rnd), "exit": int(rc),
                  "checks": v.get("checks"), "mismatches": v.get("mismatches"),
                  "same_answers": answers(v) == answers(base), "details": v.get("details")}))
PY
}
for r in $(seq "$ROUNDS"); do
  for p in $PROGRAMS; do
    "$OUT/$p" >"$OUT/$p.plain.out" 2>&1; line "$p" plain "$r" $? "$OUT/$p.plain.out" "$OUT/$p.plain.out"
    "$BIN/hotpin" run --mode profile --history "$OUT/$p.hotpin" -- "$OUT/$p" >"$OUT/$p.profile.out" 2>&1
    line "$p" profile "$r" $? "$OUT/$p.profile.out" "$OUT/$p.plain.out"
    for m in use pin-all pin-none; do
      extra=(); [ "$m" = use ] && extra=(--history "$OUT/$p.hotpin")
      "$BIN/hotpin" run --mode "$m" "${extra[@]}" -- "$OUT/$p" >"$OUT/$p.$m.out" 2>&1
      line "$p" "$m" "$r" $? "$OUT/$p.$m.out" "$OUT/$p.plain.out"
    done
  done
done
