#!/usr/bin/env bash
# Copy-path coverage: builds the CUDA programs here, runs every program under the tracer in two
# modes and checks each history against the program's own count of its copies (its last JSON
# line on stdout):
#   record  tracer record -o H -- PROGRAM              (traced from its first instruction)
#   pid     PROGRAM waits at its gate (HOTPIN_GO) after its set-up; tracer record --pid attaches;
#           the gate opens once the tracer says "tracer: recording": everything copied was
#           allocated before the tracer attached.
# One JSON line per (program, mode) is appended to $OUT/coverage.jsonl; a table ends the output.
# Needs root, nvcc, python3 with PyTorch, CuPy and JAX; the tracer binary in $BIN.
# Usage: BIN=dir OUT=dir bench/gpu/coverage/run.sh
#   PROGRAMS="cudart_static shapes"  run only these (default: all, see below)
#   MODES="pid"                      run only these modes (default: record pid)
#   TRACER_ARGS="--libc-malloc"      extra arguments for tracer record
#   W=dir                            work directory (default /tmp/hotpin-coverage-work)
#   NVCC=path NVCC_FLAGS="-O2 -arch=native"
set -u
BIN=${BIN:-.device/bin}
OUT=${OUT:-/tmp/hotpin-coverage}
W=${W:-/tmp/hotpin-coverage-work}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
NVCC_FLAGS=${NVCC_FLAGS:--O2 -arch=native}
TRACER_ARGS=${TRACER_ARGS:-}
PROGRAMS=${PROGRAMS:-cudart_static cudart_shared shapes managed torch_expandable cupy_copies jax_copies}
MODES=${MODES:-record pid}
HERE=$(cd "$(dirname "$0")" && pwd)
CUDA_HOME=$(dirname "$(dirname "$NVCC")")
mkdir -p "$OUT" "$W"
BIN=$(cd "$BIN" && pwd) || { echo "run.sh: no directory $BIN" >&2; exit 2; }
TRACER=$BIN/tracer
[ -x "$TRACER" ] || { echo "run.sh: no tracer at $TRACER" >&2; exit 2; }
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
RESULTS=$W/results.jsonl
: > "$RESULTS"

nvidia-smi -L 2>/dev/null; uname -r; "$NVCC" --version 2>/dev/null | tail -1

# Keeps the last 20 lines (each cut to 400 characters) of a log in $OUT.
keep() { # file name
  [ -s "$1" ] && tail -n 20 "$1" | cut -c1-400 > "$OUT/$2"
  return 0
}

record_line() { # a JSON line: to this run's results and to $OUT/coverage.jsonl
  echo "$1" >> "$RESULTS"
  echo "$1" >> "$OUT/coverage.jsonl"
  echo "$1" | cut -c1-300
}

fail() { # program mode message
  record_line "$(python3 -c 'import json, sys
print(json.dumps({"program": sys.argv[1], "mode": sys.argv[2], "exact": False,
                  "attributed": None, "ok": False, "error": sys.argv[3]}))' "$1" "$2" "$3")"
}

check() { # program mode history truth-file extra-json
  local line
  line=$(python3 "$HERE/check_coverage.py" "$3" "$4" "$1" "$2" "$5" 2>&1 | tail -1)
  if python3 -c 'import json, sys; assert isinstance(json.loads(sys.argv[1]), dict)' "$line" 2>/dev/null; then
    record_line "$line"
  else
    fail "$1" "$2" "checker: $line"
  fi
}

# ---- build
declare -A BUILT
build() { # name source [nvcc args...]: with $NVCC_FLAGS, else with plain -O2
  local name=$1 src=$2
  shift 2
  # shellcheck disable=SC2086  # NVCC_FLAGS is a list of flags
  if "$NVCC" $NVCC_FLAGS -o "$W/$name" "$HERE/$src" "$@" > "$W/$name-build.log" 2>&1 \
     || "$NVCC" -O2 -o "$W/$name" "$HERE/$src" "$@" >> "$W/$name-build.log" 2>&1; then
    BUILT[$name]=1
  else
    rm -f "$W/$name"
    keep "$W/$name-build.log" "$name-build.txt"
    echo "== build of $name failed: $OUT/$name-build.txt"
  fi
}
STUBS="-L$CUDA_HOME/lib64/stubs -L$CUDA_HOME/targets/x86_64-linux/lib/stubs"
for p in $PROGRAMS; do
  case $p in
    cudart_static) build cudart_static cudart_copies.cu ;;
    cudart_shared)
      build cudart_shared cudart_copies.cu -cudart shared -Xlinker -rpath -Xlinker "$CUDA_HOME/lib64" ;;
    shapes)
      # shellcheck disable=SC2086  # STUBS is a list of flags
      build shapes shapes.cu $STUBS -lcuda ;;
    managed) build managed managed.cu ;;
  esac
done

set_cmd() { # program: sets CMD, or fails
  case $1 in
    cudart_static | cudart_shared) CMD=("$W/$1" 10 "$1") ;;
    shapes | managed) CMD=("$W/$1") ;;
    torch_expandable | cupy_copies | jax_copies) CMD=(python3 "$HERE/$1.py") ;;
    *) return 1 ;;
  esac
}

is_running() { kill -0 "$1" 2>/dev/null; }

# Stops a background tracer: SIGINT (it then writes its history), after 10 s SIGTERM (a
# background job of a script may have SIGINT ignored), after 10 s more SIGKILL.
stop() { # pid
  local sig i
  for sig in INT TERM KILL; do
    is_running "$1" || return 0
    kill -"$sig" "$1" 2>/dev/null
    for ((i = 0; i < 100; i++)); do is_running "$1" || return 0; sleep 0.1; done
  done
}

# ---- record: traced from the first instruction
run_record() { # program
  local name=$1 h=$W/$1-record.json rc
  rm -f "$h"
  # SIGINT on timeout: the tracer passes it on and still writes the history
  # shellcheck disable=SC2086
  timeout -s INT -k 30 600 "$TRACER" record $TRACER_ARGS -o "$h" -- "${CMD[@]}" \
    > "$W/$name-record.out" 2> "$W/$name-record.err"
  rc=$?
  keep "$W/$name-record.err" "$name-record.err.txt"
  check "$name" record "$h" "$W/$name-record.out" "{\"rc\": $rc}"
}

# ---- pid: attached at the program's gate
run_pid() { # program
  local name=$1 go=$W/$1.go h=$W/$1-pid.json out=$W/$1-pid.out err=$W/$1-pid.err
  local terr=$W/$1-pid.tracer.err wpid target="" tpid ready="" rc trc stopped=true i
  rm -f "$go" "$h"
  : > "$err"
  : > "$terr"
  HOTPIN_GO=$go timeout -k 10 300 "${CMD[@]}" > "$out" 2> "$err" &
  wpid=$!
  for ((i = 0; i < 1200; i++)); do   # 120 s
    target=$(sed -n 's/^READY \([0-9][0-9]*\).*/\1/p' "$err" | head -1)
    [ -n "$target" ] && break
    is_running "$wpid" || break
    sleep 0.1
  done
  if [ -z "$target" ]; then
    is_running "$wpid" && kill "$wpid"
    wait "$wpid" 2>/dev/null
    keep "$err" "$name-pid.err.txt"
    fail "$name" pid "no READY line from the program (it exited, or 120 s passed)"
    return
  fi
  # shellcheck disable=SC2086
  "$TRACER" record $TRACER_ARGS --pid "$target" -o "$h" > "$W/$name-pid.tracer.out" 2> "$terr" &
  tpid=$!
  for ((i = 0; i < 300; i++)); do    # 30 s
    if grep -q '^tracer: recording' "$terr"; then ready=1; break; fi
    is_running "$tpid" || break
    sleep 0.1
  done
  if [ -z "$ready" ]; then
    stop "$tpid"
    wait "$tpid" 2>/dev/null
    is_running "$target" && kill "$target"
    is_running "$wpid" && kill "$wpid"
    wait "$wpid" 2>/dev/null
    keep "$err" "$name-pid.err.txt"
    keep "$terr" "$name-pid.tracer.err.txt"
    fail "$name" pid "the tracer did not say 'tracer: recording' within 30 s"
    return
  fi
  touch "$go"
  wait "$wpid"
  rc=$?
  # the tracer stops by itself once its target has exited
  for ((i = 0; i < 300; i++)); do is_running "$tpid" || break; sleep 0.1; done
  if is_running "$tpid"; then
    stopped=false
    stop "$tpid"
  fi
  wait "$tpid"
  trc=$?
  keep "$err" "$name-pid.err.txt"
  keep "$terr" "$name-pid.tracer.err.txt"
  check "$name" pid "$h" "$out" "{\"rc\": $rc, \"tracer_rc\": $trc, \"tracer_stopped_by_itself\": $stopped}"
}

for p in $PROGRAMS; do
  if ! set_cmd "$p"; then
    fail "$p" - "unknown program"
    continue
  fi
  case $p in
    cudart_static | cudart_shared | shapes | managed)
      if [ -z "${BUILT[$p]:-}" ]; then
        for m in $MODES; do fail "$p" "$m" "build failed"; done
        continue
      fi ;;
  esac
  for m in $MODES; do
    echo "== $p $m"
    case $m in
      record) run_record "$p" ;;
      pid) run_pid "$p" ;;
      *) fail "$p" "$m" "unknown mode" ;;
    esac
  done
done

python3 - "$RESULTS" <<'EOF' | tee "$OUT/coverage-table.txt"
import json
import sys

rows = []
for line in open(sys.argv[1]):
    try:
        rows.append(json.loads(line))
    except ValueError:
        rows.append({"program": "?", "mode": "?", "ok": False, "error": line.strip()[:80]})


def pair(r, k):
    t, e = (r.get("traced") or {}).get(k), (r.get("expected") or {}).get(k)
    return "-" if t is None and e is None else f"{'-' if t is None else t}/{'-' if e is None else e}"


def notes(r):
    n = []
    if r.get("error"):
        n.append(str(r["error"])[:70])
    for k in ("rc", "tracer_rc"):
        if r.get(k) not in (None, 0):
            n.append(f"{k}={r[k]}")
    if r.get("tracer_stopped_by_itself") is False:
        n.append("tracer had to be signalled")
    d = r.get("difference") or {}
    if d.get("h2d_bytes") or d.get("d2h_bytes"):
        n.append(f"bytes off h2d {d.get('h2d_bytes')} d2h {d.get('d2h_bytes')}")
    if r.get("unresolved"):
        n.append(f"unresolved={r['unresolved']}")
    if (r.get("d2d") or {}).get("match") is False:
        x = r["d2d"]
        n.append(f"d2d {x['peer_copies']}+{x['other_copies']}/{x['truth']}")
    for name, c in (r.get("prefetch") or {}).items():
        if c.get("match") is not True:
            n.append(f"prefetch {name} {c.get('traced')}/{c.get('truth')}")
    leak = r.get("device_leaked_bytes") or {}
    if leak and leak.get("match") is not True:
        n.append(f"leak {leak.get('traced')}/{leak.get('truth')}")
    return "; ".join(n)


fmt = "{:<17} {:<6} {:<4} {:<5} {:>5} {:>11} {:>11} {:>4}  {}"
print(fmt.format("program", "mode", "ok", "exact", "attr", "h2d t/e", "d2h t/e", "lost", "notes"))
for r in rows:
    attr = r.get("attributed")
    print(fmt.format(str(r.get("program")), str(r.get("mode")), "yes" if r.get("ok") else "NO",
                     "yes" if r.get("exact") else "no", "-" if attr is None else f"{attr:.3f}",
                     pair(r, "h2d"), pair(r, "d2h"), str(r.get("lost", "-")), notes(r)))
print(f"{sum(1 for r in rows if r.get('ok'))} of {len(rows)} ok")
EOF
python3 -c 'import json, sys; sys.exit(0 if all(json.loads(l).get("ok") for l in open(sys.argv[1])) else 1)' "$RESULTS"
