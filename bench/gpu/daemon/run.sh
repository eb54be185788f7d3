#!/usr/bin/env bash
# `tracer daemon` on the GPU machine: started first, with no filter, it traces whatever CUDA
# programs run after it. A PyTorch program (expandable segments) and a CuPy program from
# bench/gpu/coverage run one after the other; each prints its own counts. Each stored
# history is exported to JSON and checked against them by bench/gpu/coverage/check_coverage.py
# (mode "record": the daemon sees a program from its first CUDA call). The metrics are
# scraped while the second program runs and after both; the daemon's CPU time and memory are
# read from /proc, and sampled every 0.5 s while each program runs. Ends with SIGTERM.
# A program without a .py in bench/gpu/coverage is built from its .cu there with nvcc (before
# the daemon starts) and run with $PROGRAM_ARGS. $DAEMON_ARGS go to the daemon (for example
# --max-allocations 1000 with PROGRAMS=steps: a long-lived loop whose history is folded).
# Usage: BIN=dir OUT=dir bench/gpu/daemon/run.sh   (root; tracer in $BIN)
set -u
BIN=$(cd "${BIN:-.device/bin}" && pwd) || exit 2
OUT=${OUT:-/tmp/hotpin-daemon}
W=${W:-/tmp/hotpin-daemon-work}
HERE=$(cd "$(dirname "$0")" && pwd)
COVERAGE=$HERE/../coverage
PROGRAMS=${PROGRAMS:-torch_expandable cupy_copies}
mkdir -p "$OUT" "$W"
rm -rf "$W/store"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
PORT=${PORT:-19464}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
for program in $PROGRAMS; do
  if [ ! -f "$COVERAGE/$program.py" ]; then
    "$NVCC" -O2 -o "$W/$program" "$COVERAGE/$program.cu" || echo "build of $program failed"
  fi
done

scrape() { python3 -c 'import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "http://127.0.0.1:$PORT/metrics"; }
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); print ($12 + $13) / hz }' "/proc/$1/stat"; }
mem() { grep -E 'VmRSS|VmHWM|RssAnon|RssFile' "/proc/$1/status" | tr -s ' \t' ' ' | paste -sd' '; }

# shellcheck disable=SC2086  # DAEMON_ARGS is a list of arguments
HOTPIN_LOG=info "$BIN/tracer" daemon --store "$W/store" --metrics "127.0.0.1:$PORT" ${DAEMON_ARGS:-} \
  > "$W/daemon.log" 2>&1 &
DAEMON=$!
for _ in $(seq 100); do grep -q "tracing every CUDA process" "$W/daemon.log" && break; sleep 0.1; done
grep "tracer daemon" "$W/daemon.log"
echo "daemon after start: cpu $(cpu_s $DAEMON) s, $(mem $DAEMON)"

: > "$W/results.jsonl"
for program in $PROGRAMS; do
  start=$(date +%s.%N)
  if [ -f "$COVERAGE/$program.py" ]; then
    python3 "$COVERAGE/$program.py" > "$W/$program.out" 2> "$W/$program.err" &
  else
    # shellcheck disable=SC2086  # PROGRAM_ARGS is a list of arguments
    "$W/$program" ${PROGRAM_ARGS:-} > "$W/$program.out" 2> "$W/$program.err" &
  fi
  PID=$!
  # The daemon's resident memory while the program runs (KiB).
  ( while kill -0 $PID 2>/dev/null; do awk '/VmRSS/ {print $2}' /proc/$DAEMON/status; sleep 0.5; done ) \
    > "$W/rss-$program.txt" &
  if [ "$program" = cupy_copies ]; then sleep 2; scrape > "$OUT/metrics-while-running.txt" || true; fi
  wait $PID; rc=$?
  end=$(date +%s.%N)
  # The history appears once the daemon has seen the exit (rescan every 100 ms).
  history=""
  for _ in $(seq 100); do
    history=$(ls "$W"/store/*/*-"$PID".hotpin 2>/dev/null | head -1)
    [ -n "$history" ] && break
    sleep 0.1
  done
  if [ -z "$history" ]; then
    echo "{\"program\": \"$program\", \"ok\": false, \"error\": \"no history of pid $PID in the store\"}" | tee -a "$W/results.jsonl"
    continue
  fi
  "$BIN/tracer" export --format json "$history" -o "$W/$program.json" 2>/dev/null
  line=$(python3 "$COVERAGE/check_coverage.py" "$W/$program.json" "$W/$program.out" "$program" record \
    "{\"rc\": $rc, \"pid\": $PID, \"seconds\": $(python3 -c "print(round($end - $start, 2))"), \"stored_as\": \"$(basename "$(dirname "$history")")/$(basename "$history")\"}" | tail -1)
  echo "$line" >> "$W/results.jsonl"
  echo "$line" | cut -c1-400
  echo "daemon after $program: cpu $(cpu_s $DAEMON) s, $(mem $DAEMON)"
  echo "daemon RSS while $program ran (KiB, every 0.5 s): $(paste -sd' ' "$W/rss-$program.txt")"
done
scrape > "$OUT/metrics-after.txt" || echo "scrape failed"
grep -E '^hotpin_(program_|lost|histories|probe|processes)' "$OUT/metrics-after.txt" | head -30
echo "daemon at the end: cpu $(cpu_s $DAEMON) s, $(mem $DAEMON), ran $(ps -o etimes= -p $DAEMON) s"
kill -TERM $DAEMON; wait $DAEMON; echo "daemon exit: $?"
tail -3 "$W/daemon.log" | cut -c1-300
# The allocator's use mode finds the program's history in the store by itself.
case " $PROGRAMS " in *" torch_expandable "*)
  "$BIN/hotpin" run --mode use --store "$W/store" -- python3 "$COVERAGE/torch_expandable.py" \
    > "$W/use.out" 2> "$W/use.err"
  echo "hotpin run --mode use (no --history): exit $?; $(grep -m1 'hotpin: using' "$W/use.err" | cut -c1-300)" ;;
esac
cp "$W/results.jsonl" "$OUT/daemon.jsonl"
ls -lR "$W/store" > "$OUT/store.txt"
grep -v " INFO " "$W/daemon.log" | tail -20 > "$OUT/daemon-log-tail.txt"
python3 -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    print(r.get("program"), "exact" if r.get("exact") else "NOT exact", "attributed", r.get("attributed"),
          "expected", r.get("expected"), "traced", r.get("traced"), "lost", r.get("lost"))
sys.exit(0 if rows and all(r.get("exact") for r in rows) else 1)' "$W/results.jsonl"
