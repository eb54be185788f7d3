#!/usr/bin/env bash
# The tracer's cost on a GPU machine (issue 14): per traced copy (cudaMemcpy and
# cudaMemcpyAsync, untraced and traced interleaved), the time from the command's exit to the
# tracer's (uprobe_multi links, then perf links for comparison), Ctrl-C on --pid, and exact
# counts on real programs (PyTorch, a static-cudart nvcc program, JAX, CuPy) checked against
# each program's own count. Binaries in $BIN.
# Usage: BIN=dir OUT=dir bash bench/gpu/tracer_cost.sh [runs]
set -u
BIN=${BIN:-.device/bin}
OUT=${OUT:-/tmp/hotpin-cost}
RUNS=${1:-5}
HERE=$(cd "$(dirname "$0")" && pwd)
W=/tmp/hotpin-cost-work
mkdir -p "$OUT" "$W"
export PYTHONUNBUFFERED=1
nvcc -O2 -cudart shared "$HERE/copy_cost.cu" -o "$W/copy_cost" || exit 1
stop_after() { python3 -c "import json,sys; print(round(float(sys.argv[1]) - json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])['exit_unix_s'], 3))" "$1" "$2"; }
echo "== per copy, and stop after the command's exit"
for r in $(seq "$RUNS"); do
  for mode in sync async; do
    "$W/copy_cost" "$mode" 40000 >"$W/u.out"
    "$BIN/tracer" record -o "$W/c.json" -- "$W/copy_cost" "$mode" 40000 >"$W/t.out" 2>>"$OUT/cost.err"
    end=$(date +%s.%N)
    stop=$(stop_after "$end" "$W/t.out")
    check=$(python3 "$HERE/check_counts.py" "$W/c.json" "$W/t.out" copy_cost)
    # The runtime's copies probed too (three probe hits a copy, as before): for comparison.
    "$BIN/tracer" record --runtime-copies -o "$W/r.json" -- "$W/copy_cost" "$mode" 40000 >"$W/r.out" 2>>"$OUT/cost.err"
    rcheck=$(python3 "$HERE/check_counts.py" "$W/r.json" "$W/r.out" copy_cost)
    python3 - "$r" "$mode" "$W/u.out" "$W/t.out" "$W/r.out" "$stop" "$check" "$rcheck" <<'PY' | tee -a "$OUT/cost.jsonl"
import json, sys
r, mode, u, t, rt, stop, check, rcheck = sys.argv[1:9]
last = lambda p: json.loads(open(p).read().strip().splitlines()[-1])
u, t, rt, check, rcheck = last(u), last(t), last(rt), json.loads(check), json.loads(rcheck)
print(json.dumps({"run": int(r), "mode": mode, "untraced_us": u["us_per_copy"], "traced_us": t["us_per_copy"],
                  "added_us": round(t["us_per_copy"] - u["us_per_copy"], 4),
                  "runtime_copies_us": rt["us_per_copy"], "runtime_copies_added_us": round(rt["us_per_copy"] - u["us_per_copy"], 4),
                  "stop_s": float(stop), "exact": check["exact"], "exact_runtime_copies": rcheck["exact"],
                  "calls": check["calls"], "nested": check["nested"]}))
PY
  done
done
echo "== stop with one perf link per probe (HOTPIN_PERF_UPROBES=1), for comparison"
for r in 1 2 3; do
  HOTPIN_PERF_UPROBES=1 "$BIN/tracer" record -o "$W/p.json" -- "$W/copy_cost" sync 40000 >"$W/t.out" 2>>"$OUT/cost.err"
  end=$(date +%s.%N); echo "{\"run\": $r, \"links\": \"perf\", \"stop_s\": $(stop_after "$end" "$W/t.out")}" | tee -a "$OUT/stop.jsonl"
done
echo "== Ctrl-C on tracer record --pid"
for links in multi perf multi perf multi perf; do
  "$W/copy_cost" loop 30 >/dev/null & prog=$!
  sleep 1
  if [ $links = perf ]; then export HOTPIN_PERF_UPROBES=1; else unset HOTPIN_PERF_UPROBES; fi
  "$BIN/tracer" record --pid $prog -o "$W/pid.json" 2>>"$OUT/pid.err" & tr=$!
  sleep 2; t0=$(date +%s.%N); kill -INT $tr; wait $tr; t1=$(date +%s.%N)
  unset HOTPIN_PERF_UPROBES
  echo "{\"links\": \"$links\", \"ctrl_c_to_exit_s\": $(python3 -c "print(round($t1-$t0,3))")}" | tee -a "$OUT/stop.jsonl"
  kill $prog; wait $prog 2>/dev/null
done
echo "== exact counts on real programs (record --)"
"$BIN/tracer" record -o "$W/torch.json" -- python3 "$HERE/torch_copies.py" >"$W/torch.out" 2>"$OUT/torch.err"
python3 "$HERE/check_history.py" "$W/torch.json" "$(tail -1 "$W/torch.out")" torch | tee -a "$OUT/exact.jsonl" | cut -c1-400
for p in "jax python3 $HERE/unmodified/jax_batches.py 20" "cupy python3 $HERE/unmodified/cupy_pinned.py 20"; do
  set -- $p; name=$1; shift
  "$BIN/tracer" record -o "$W/$name.json" -- "$@" >"$W/$name.out" 2>"$OUT/$name.err"
  python3 "$HERE/check_counts.py" "$W/$name.json" "$W/$name.out" "$name" | tee -a "$OUT/exact.jsonl" | cut -c1-400
done
nvcc -O2 -o "$W/static_copies" "$HERE/static_copies.cu" && \
  "$BIN/tracer" record -o "$W/static.json" -- "$W/static_copies" 50 >"$W/static.out" 2>"$OUT/static.err"
tail -1 "$W/static.out"
python3 "$HERE/check_history.py" "$W/static.json" "$(tail -1 "$W/static.out")" static | tee -a "$OUT/exact.jsonl" | cut -c1-400
