#!/usr/bin/env bash
# Three unmodified PyTorch programs under `hotpin run`, on the GPU machine. Each is profiled
# once (the tracer records it as it is), then run ROUNDS times in four configurations,
# interleaved: plain (no hotpin), pin-none, pin-all, use (from that profile). Each line of
# $OUT/unmodified.jsonl is the program's own JSON (time and copies per direction) plus the
# configuration, the round and the interposer's counters.
# Usage: BIN=dir OUT=dir bash bench/gpu/unmodified/run.sh ROUNDS [PROGRAMS...]
set -u
BIN=${BIN:-target/release}
OUT=${OUT:-/tmp/hotpin-unmodified}
ROUNDS=${1:-3}
shift || true
PROGRAMS=${*:-pageable_batches dataloader_pinned offload_reload}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
emit() { # program config round stdout-file report-prefix
  python3 - "$@" >>"$OUT/unmodified.jsonl" <<'PY'
import glob, json, sys
program, config, rnd, stdout, prefix = sys.argv[1:6]
lines = [l for l in open(stdout) if l.startswith("{")]
d = json.loads(lines[-1]) if lines else {"error": open(stdout).read()[-400:]}
d.update(config=config, round=int(rnd))
reports = sorted(glob.glob(prefix + ".*.json")) if prefix else []
if reports:
    r = json.load(open(reports[0]))
    d["counters"] = r["counters"]
print(json.dumps(d))
PY
}
for p in $PROGRAMS; do
  "$BIN/hotpin" run --mode profile --history "$OUT/$p.hotpin" -- python3 "$HERE/$p.py" \
    >"$OUT/$p.profile.out" 2>"$OUT/$p.profile.err"
  echo "$p: profile exit $?"
  "$BIN/tracer" report "$OUT/$p.hotpin" >"$OUT/$p.report.txt" 2>&1
  for r in $(seq "$ROUNDS"); do
    python3 "$HERE/$p.py" >"$OUT/$p.plain.$r.out" 2>&1
    emit "$p" plain "$r" "$OUT/$p.plain.$r.out" ""
    for mode in pin-none pin-all use; do
      extra=()
      [ "$mode" = use ] && extra=(--history "$OUT/$p.hotpin")
      "$BIN/hotpin" run --mode "$mode" "${extra[@]}" --report "$OUT/$p.$mode.$r" -- \
        python3 "$HERE/$p.py" >"$OUT/$p.$mode.$r.out" 2>&1
      emit "$p" "$mode" "$r" "$OUT/$p.$mode.$r.out" "$OUT/$p.$mode.$r"
    done
    echo "$p: round $r done"
  done
done
