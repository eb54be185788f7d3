#!/usr/bin/env bash
# Transparency: unmodified programs that check their own results (torch_checks.py,
# cupy_checks.py, jax_checks.py, c_checks.cu), on the GPU machine, in every configuration.
# Each program is profiled once (its history, for use mode), then run ROUNDS rounds of the
# configurations interleaved: plain (no hotpin), use (from that profile), pin-all, profile
# (recorded again, into a throwaway history); auto and auto-history (auto mode from the
# history an auto run learned first, as round 0's "auto-learn") may be added. Each run appends one line to
# $OUT/transparency.jsonl: the program's own JSON line (checks and mismatches, observed
# answers, copies) plus config, round, exit status, wall time, the interposer's counters
# (summed over the report files of the run's processes) and, after a crash or a check that
# raised, the tail of its stderr. At the end summarize.py prints the table
# ($OUT/summary.md).
# Usage: BIN=dir OUT=dir bash bench/gpu/transparency/run.sh ROUNDS [PROGRAMS...]
# Environment: CONFIGS (default "plain use pin-all profile"; pin-none may be added), NVCC
# (default /usr/local/cuda/bin/nvcc), NVCC_FLAGS (default -arch=sm_90), RUN_TIMEOUT
# (seconds a run may take, default 180).
set -u
BIN=${BIN:-target/release}
OUT=${OUT:-/tmp/hotpin-transparency}
ROUNDS=${1:-3}
shift || true
PROGRAMS=${*:-torch_checks cupy_checks jax_checks c_checks}
CONFIGS=${CONFIGS:-plain use pin-all profile}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
NVCC_FLAGS=${NVCC_FLAGS:--arch=sm_90}
RUN_TIMEOUT=${RUN_TIMEOUT:-180}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BIN=$(cd "$BIN" && pwd)
export PYTHONUNBUFFERED=1
JSONL="$OUT/transparency.jsonl"
if [ -s "$JSONL" ]; then
  mv "$JSONL" "$JSONL.$(date +%Y%m%d-%H%M%S)"
fi

emit() { # program config round exit stdout stderr report-prefix seconds
  local line
  line=$(python3 "$HERE/../run_line.py" "$@") || return
  echo "$line" >>"$JSONL"
  python3 - "$line" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
checks = d.get("checks", {})
bad = {k: v for k, v in checks.items() if v[1]}
print(f"{d['program']}: {d['config']} round {d['round']}: exit {d['exit']}, "
      f"{sum(v[0] for v in checks.values())} checks, "
      f"{sum(v[1] for v in checks.values())} mismatches {bad or ''}"
      f"{' errors: ' + ', '.join(d['errors']) if d.get('errors') else ''}"
      f"{' ' + d['error'] if 'error' in d else ''}", file=sys.stderr)
PY
}

run_one() { # program config round
  local p=$1 config=$2 r=$3
  local tag="$p.$config.$r"
  local out="$OUT/$tag.out" err="$OUT/$tag.err" report="" history
  local hp=("$BIN/hotpin" run --mode "$config")
  rm -f "$OUT/$tag".report.*.json
  case $config in
    plain) hp=() ;;
    auto-history)
      # Auto mode from the history its first run (round 0, "auto-learn") learned: fresh each
      # round, so that rounds do not feed each other.
      cp "$OUT/$p.learned.hotpin" "$OUT/$tag.hotpin" 2>/dev/null || true
      report="$OUT/$tag.report"
      hp=("$BIN/hotpin" run --mode auto --history "$OUT/$tag.hotpin" --report "$report" --) ;;
    auto-learn)
      report="$OUT/$tag.report"
      hp=("$BIN/hotpin" run --mode auto --history "$OUT/$p.learned.hotpin" --report "$report" --) ;;
    use) report="$OUT/$tag.report"; hp+=(--history "$OUT/$p.hotpin" --report "$report" --) ;;
    profile)
      # Round 0 is the profile use mode reads; later ones are thrown away.
      history="$OUT/$tag.hotpin"
      [ "$r" = 0 ] && history="$OUT/$p.hotpin"
      report="$OUT/$tag.report"; hp+=(--history "$history" --report "$report" --) ;;
    *) report="$OUT/$tag.report"; hp+=(--report "$report" --) ;;
  esac
  local start end rc
  start=$(date +%s.%N)
  timeout -k 10 "$RUN_TIMEOUT" "${hp[@]}" "${cmd[@]}" >"$out" 2>"$err"
  rc=$?
  end=$(date +%s.%N)
  emit "$p" "$config" "$r" "$rc" "$out" "$err" "$report" \
    "$(python3 -c "print($end - $start)")"
}

if [[ " $PROGRAMS " == *" c_checks "* ]]; then
  [ -x "$NVCC" ] || NVCC=$(command -v nvcc || echo "$NVCC")
  cudadir=$(dirname "$(dirname "$NVCC")")
  # shellcheck disable=SC2086
  if "$NVCC" -O2 -cudart shared $NVCC_FLAGS -Xlinker -rpath -Xlinker "$cudadir/lib64" \
      -o "$OUT/c_checks" "$HERE/c_checks.cu" -lpthread >"$OUT/c_checks.build.txt" 2>&1; then
    echo "c_checks: built ($OUT/c_checks)"
  else
    echo "c_checks: build failed:"; tail -20 "$OUT/c_checks.build.txt"
  fi
fi

for p in $PROGRAMS; do
  case $p in
    c_checks) cmd=("$OUT/c_checks") ;;
    *) cmd=(python3 "$HERE/$p.py") ;;
  esac
  if [ "$p" = c_checks ] && [ ! -x "$OUT/c_checks" ]; then
    echo "c_checks: not built, skipped"; continue
  fi
  run_one "$p" profile 0
  if [[ " $CONFIGS " == *" auto-history "* ]]; then
    rm -f "$OUT/$p.learned.hotpin"
    run_one "$p" auto-learn 0
  fi
  if [ -x "$BIN/tracer" ] && [ -s "$OUT/$p.hotpin" ]; then
    "$BIN/tracer" report "$OUT/$p.hotpin" >"$OUT/$p.report.txt" 2>&1
  fi
  for r in $(seq "$ROUNDS"); do
    for config in $CONFIGS; do
      run_one "$p" "$config" "$r"
    done
  done
done
python3 "$HERE/summarize.py" "$JSONL" | tee "$OUT/summary.md"
