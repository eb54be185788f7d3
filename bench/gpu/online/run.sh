#!/usr/bin/env bash
# Online decisions: the programs of this folder under `hotpin run`, on the GPU machine, against
# the program as written (plain) and the version a user pins by hand (by-hand, BY_HAND=1).
# Per program, first:
#   profile 0     hotpin run --mode profile --history $OUT/$p.profile.hotpin (what use mode reads)
#   auto-learn 0  hotpin run --mode auto --history $OUT/$p.learned.hotpin (a first run that
#                 writes what it learned: what auto-history starts from)
# (`tracer report` of each, where BIN has the tracer: $OUT/$p.profile.txt, $p.learned.txt)
# then ROUNDS rounds, the configurations interleaved within each round (CONFIGS, in order):
#   plain         python3 prog
#   by-hand       BY_HAND=1 python3 prog
#   pin-all       hotpin run --mode pin-all
#   auto-first    hotpin run --mode auto --history $OUT/$p.first.$r.hotpin (removed first: no
#                 history, a first run)
#   auto-history  hotpin run --mode auto --history $OUT/$p.history.$r.hotpin, a copy of
#                 $p.learned.hotpin made fresh every round (rounds do not feed each other)
#   auto-history-at-birth  auto-history with HOTPIN_AT_FIRST_COPY=0 (the blocks the history
#                 pins registered at birth, as before 2026-11-28, not at their first copy), from
#                 its own copy $OUT/$p.atbirth.$r.hotpin
#   auto-profile  hotpin run --mode auto --history $OUT/$p.fromprofile.$r.hotpin, a copy of
#                 the profile made fresh every round (auto mode starting from a profile)
#   use           hotpin run --mode use --history $OUT/$p.profile.hotpin
#   budget        auto-first with --budget = the pinned_by_hand_bytes of this round's by-hand
#                 run ($OUT/$p.budget.$r.hotpin; skipped when that is 0 or by-hand did not run)
# Every hotpin run has --report $OUT/$p.$config.$r (each process writes
# $OUT/$p.$config.$r.<pid>.json). Each run appends one line to $OUT/online.jsonl: the program's
# own JSON line plus program, config, round, exit status, wall seconds ("elapsed"), the
# interposer's counters summed over the run's report files (peaks: the largest), and after a
# failure the tail of its stderr; a configuration that cannot run appends a line with
# "skipped" and why. At the end summarize.py prints the tables and the targets
# ($OUT/summary.md).
# Usage: BIN=dir OUT=dir bash bench/gpu/online/run.sh ROUNDS [PROGRAMS...]
#   PROGRAMS default: torch_loop over_pinned cupy_numpy jax_loop dataloader offload (big_pin
#   only when named).
# Environment: CONFIGS (default "plain by-hand pin-all auto-first auto-history auto-profile use
# budget"),
# PROGRAM_DIR (where the programs are, default this folder: bench/gpu/workloads/run.sh uses it),
# RUN_TIMEOUT (seconds a run may take, default 120), PYTHON (the interpreter that runs the
# programs, default python3), SKIP_PROFILE=1 (no profile run: use is skipped unless
# $OUT/$p.profile.hotpin is there already). HOTPIN_COSTS and the rest of the environment are
# inherited by every run; BY_HAND is unset except for by-hand runs.
set -u
BIN=${BIN:-target/release}
OUT=${OUT:-/tmp/hotpin-online}
ROUNDS=${1:-3}
shift || true
PROGRAMS=${*:-torch_loop over_pinned cupy_numpy jax_loop dataloader offload}
CONFIGS=${CONFIGS:-plain by-hand pin-all auto-first auto-history auto-profile use budget}
RUN_TIMEOUT=${RUN_TIMEOUT:-120}
PYTHON=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
PROGRAM_DIR=$(cd "${PROGRAM_DIR:-$HERE}" && pwd)
if [ ! -x "$BIN/hotpin" ]; then
  echo "run.sh: no hotpin binary at $BIN/hotpin (give BIN=dir)" >&2
  exit 1
fi
BIN=$(cd "$BIN" && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
unset BY_HAND
export PYTHONUNBUFFERED=1
JSONL="$OUT/online.jsonl"
if [ -s "$JSONL" ]; then
  mv "$JSONL" "$JSONL.$(date +%Y%m%d-%H%M%S)"
fi

emit() { # program config round exit stdout stderr report-prefix start end extra-json
  local line seconds
  seconds=$(python3 -c 'import sys; print(float(sys.argv[2]) - float(sys.argv[1]))' "$8" "$9")
  line=$(python3 "$HERE/../run_line.py" "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$seconds" "${10}") \
    || return
  echo "$line" >>"$JSONL"
  python3 - "$line" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
c = d.get("counters", {})
notes = []
if c:
    pinned = c.get("peak_pinned_bytes",
                   c.get("peak_promoted_bytes", 0) + c.get("kept_pinned_bytes", 0))
    notes.append("pinned %d MiB" % (pinned >> 20))
if d.get("pinned_by_hand_bytes"):
    notes.append("by hand %d MiB" % (d["pinned_by_hand_bytes"] >> 20))
if "error" in d:
    notes.append(d["error"])
print(f"{d['program']}: {d['config']} round {d['round']}: exit {d['exit']}, "
      f"{d.get('seconds', '-')} s, {d.get('checks', '-')} checks, "
      f"{d.get('mismatches', '-')} mismatches" + "".join(", " + n for n in notes),
      file=sys.stderr)
PY
}

skip() { # program config round why
  python3 -c 'import json, sys
p, c, r, why = sys.argv[1:5]
print(json.dumps({"program": p, "config": c, "round": int(r), "skipped": why}))' \
    "$@" >>"$JSONL"
  echo "$1: $2 round $3: skipped ($4)" >&2
}

# run_one program config round extra-json [hotpin run options...]: plain and by-hand run the
# program alone; any other configuration runs it under `hotpin run OPTIONS --report ...`.
run_one() {
  local p=$1 config=$2 r=$3 extra=$4
  shift 4
  local tag="$p.$config.$r"
  local out="$OUT/$tag.out" err="$OUT/$tag.err" report="" cmd
  rm -f "$OUT/$tag".*.json
  case $config in
    plain) cmd=("$PYTHON" "$PROGRAM_DIR/$p.py") ;;
    by-hand) cmd=(env BY_HAND=1 "$PYTHON" "$PROGRAM_DIR/$p.py") ;;
    auto-history-at-birth)
      report="$OUT/$tag"
      cmd=(env HOTPIN_AT_FIRST_COPY=0 "$BIN/hotpin" run "$@" --report "$report" -- "$PYTHON" "$PROGRAM_DIR/$p.py") ;;
    *)
      report="$OUT/$tag"
      cmd=("$BIN/hotpin" run "$@" --report "$report" -- "$PYTHON" "$PROGRAM_DIR/$p.py") ;;
  esac
  local began ended rc
  began=$(date +%s.%N)
  HOTPIN_BENCH_T0=$began timeout -k 10 "$RUN_TIMEOUT" "${cmd[@]}" >"$out" 2>"$err"
  rc=$?
  ended=$(date +%s.%N)
  emit "$p" "$config" "$r" "$rc" "$out" "$err" "$report" "$began" "$ended" "$extra"
}

# The pinned_by_hand_bytes of a run's JSON line (empty when it printed none).
by_hand_bytes() {
  python3 - "$1" <<'PY'
import json, sys
for line in reversed(open(sys.argv[1], errors="replace").read().splitlines()):
    if line.startswith("{"):
        try:
            print(int(json.loads(line).get("pinned_by_hand_bytes", 0)))
        except (ValueError, TypeError, AttributeError):
            pass
        break
PY
}

for p in $PROGRAMS; do
  if [ ! -f "$PROGRAM_DIR/$p.py" ]; then
    echo "$p: no $PROGRAM_DIR/$p.py, skipped" >&2
    continue
  fi
  profile="$OUT/$p.profile.hotpin"
  learned="$OUT/$p.learned.hotpin"
  if [ "${SKIP_PROFILE:-0}" != 1 ]; then
    rm -f "$profile"
    run_one "$p" profile 0 '{}' --mode profile --history "$profile"
    if [ -x "$BIN/tracer" ] && [ -s "$profile" ]; then
      "$BIN/tracer" report "$profile" >"$OUT/$p.profile.txt" 2>&1
    fi
  fi
  rm -f "$learned"
  run_one "$p" auto-learn 0 '{}' --mode auto --history "$learned"
  if [ -x "$BIN/tracer" ] && [ -s "$learned" ]; then
    "$BIN/tracer" report "$learned" >"$OUT/$p.learned.txt" 2>&1
  fi
  for r in $(seq "$ROUNDS"); do
    hand=""
    for config in $CONFIGS; do
      case $config in
        plain) run_one "$p" plain "$r" '{}' ;;
        by-hand)
          run_one "$p" by-hand "$r" '{}'
          hand=$(by_hand_bytes "$OUT/$p.by-hand.$r.out")
          hand=${hand:-none} ;;
        pin-all) run_one "$p" pin-all "$r" '{}' --mode pin-all ;;
        auto-first)
          rm -f "$OUT/$p.first.$r.hotpin"
          run_one "$p" auto-first "$r" '{}' --mode auto --history "$OUT/$p.first.$r.hotpin" ;;
        auto-history)
          if [ -s "$learned" ]; then
            cp "$learned" "$OUT/$p.history.$r.hotpin"
            run_one "$p" auto-history "$r" '{}' --mode auto --history "$OUT/$p.history.$r.hotpin"
          else
            skip "$p" auto-history "$r" "no learned history ($learned)"
          fi ;;
        auto-history-at-birth)
          if [ -s "$learned" ]; then
            cp "$learned" "$OUT/$p.atbirth.$r.hotpin"
            run_one "$p" auto-history-at-birth "$r" '{}' --mode auto --history "$OUT/$p.atbirth.$r.hotpin"
          else
            skip "$p" auto-history-at-birth "$r" "no learned history ($learned)"
          fi ;;
        auto-profile)
          if [ -s "$profile" ]; then
            cp "$profile" "$OUT/$p.fromprofile.$r.hotpin"
            run_one "$p" auto-profile "$r" '{}' --mode auto --history "$OUT/$p.fromprofile.$r.hotpin"
          else
            skip "$p" auto-profile "$r" "no profile history ($profile)"
          fi ;;
        use)
          if [ -s "$profile" ]; then
            run_one "$p" use "$r" '{}' --mode use --history "$profile"
          else
            skip "$p" use "$r" "no profile history ($profile)"
          fi ;;
        budget)
          case $hand in
            "") skip "$p" budget "$r" "no by-hand run before it in this round" ;;
            none) skip "$p" budget "$r" "the by-hand run printed no JSON line" ;;
            0) skip "$p" budget "$r" "pinned_by_hand_bytes is 0" ;;
            *)
              rm -f "$OUT/$p.budget.$r.hotpin"
              run_one "$p" budget "$r" "{\"budget_bytes\": $hand}" --mode auto \
                --history "$OUT/$p.budget.$r.hotpin" --budget "$hand" ;;
          esac ;;
        *) echo "run.sh: unknown configuration $config, skipped" >&2 ;;
      esac
    done
    echo "$p: round $r done" >&2
  done
done
python3 "$HERE/summarize.py" "$JSONL" | tee "$OUT/summary.md"
