#!/usr/bin/env bash
# The daemon behind a program that allocates a fresh pinned 4 KiB buffer per step, copies it
# to the device and back and frees it, with nothing between steps (about 15 000 buffers a
# second on the build machine), on the CUDA stand-in (a test fixture, not CUDA), while a
# shell loop keeps one core busy. Per run: the daemon's events received and lost, as its
# history in the store counts them, and the bench's own count of its calls.
# Usage (as root, from the workspace root, after `cargo build --release -p tracer-agent
# -p transfer-bench` and `cargo xtask demo` or any step that installs the stand-in into
# target/demo/standin): bash bench/daemon-load/run.sh [RUNS] [STEPS]
set -u
RUNS=${1:-10}
STEPS=${2:-150000}
BIN=${BIN:-target/release}
STANDIN=${STANDIN:-target/demo/standin}
OUT=${OUT:-/tmp/hotpin-daemon-load}
rm -rf "$OUT"; mkdir -p "$OUT"
busy() { while :; do :; done; }
for r in $(seq "$RUNS"); do
  store="$OUT/store.$r"
  "$BIN/tracer" daemon --metrics off --store "$store" --command '*transfer-bench*' \
    --max-allocations 2000 >"$OUT/daemon.$r.out" 2>"$OUT/daemon.$r.err" &
  daemon=$!
  for _ in $(seq 100); do grep -q "tracing" "$OUT/daemon.$r.err" 2>/dev/null && break; sleep 0.1; done
  busy & spin=$!
  began=$(date +%s.%N)
  LD_LIBRARY_PATH="$STANDIN" "$BIN/transfer-bench" --cudart "$STANDIN/libcudart.so.13" \
    --mode pinned --size 4K --hot 1 --transfers 1 --cold 1 --steps "$STEPS" >"$OUT/bench.$r.json"
  ended=$(date +%s.%N)
  kill "$spin"
  sleep 2
  # The daemon's CPU time so far (user + system, clock ticks), before it writes at exit.
  cpu=$(awk '{print $14 + $15}' "/proc/$daemon/stat")
  kill -TERM "$daemon"; wait "$daemon"
  python3 - "$store" "$r" "$began" "$ended" "$STEPS" "$cpu" "$(getconf CLK_TCK)" <<'PY'
import glob, json, os, subprocess, sys
store, r, began, ended, steps, cpu, tck = sys.argv[1:8]
files = [f for f in glob.glob(os.path.join(store, "**", "*"), recursive=True) if os.path.isfile(f)]
lost = received = None
for f in files:
    out = subprocess.run(["target/release/tracer", "report", "--json", f], capture_output=True, text=True)
    try:
        report = json.loads(out.stdout)
    except ValueError:
        continue
    lost, received = report["lost_events"], report["calls"]
seconds = float(ended) - float(began)
print(json.dumps({"run": int(r), "steps": int(steps), "seconds": round(seconds, 2),
                  "allocs_per_s": round(int(steps) / seconds), "calls_seen": received,
                  "lost": lost, "histories": len(files),
                  "daemon_cpu_s": round(int(cpu) / int(tck), 2)}))
PY
done
