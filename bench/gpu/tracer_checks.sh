#!/usr/bin/env bash
# Tracer checks on a GPU machine: probes on the real libraries, exact counts for PyTorch and a
# static-cudart nvcc program and transfer-bench, then overhead. Needs root, python3 with
# PyTorch, nvcc; the tracer and transfer-bench release binaries in $BIN.
# Usage: BIN=dir OUT=dir bench/gpu/tracer_checks.sh [runs]
set -u
BIN=${BIN:-.device/bin}
OUT=${OUT:-/tmp/hotpin-out}
RUNS=${1:-5}
W=/tmp/hotpin-work
mkdir -p "$OUT" "$W"
export PYTHONUNBUFFERED=1
CUDART=/usr/local/cuda/targets/x86_64-linux/lib/libcudart.so.13
LIBCUDA=$(ls /usr/local/nvidia/lib64/libcuda.so.* 2>/dev/null | grep -v 'so.1$' | head -1)
HERE=$(dirname "$0")
nvidia-smi -L; uname -r
echo "== probes on $CUDART and $LIBCUDA"
"$BIN/tracer" probes --cuda-runtime "$CUDART" --cuda-driver "$LIBCUDA" > "$OUT/probes.txt" 2>&1
grep -c ' attached$' "$OUT/probes.txt"; grep 'unavailable' "$OUT/probes.txt" | head -20; tail -1 "$OUT/probes.txt"

check() { # name expected-json history
  python3 "$HERE/check_history.py" "$3" "$2" "$1" | tee -a "$OUT/checks.jsonl"
}
echo "== PyTorch known copies"
exp=$("$BIN/tracer" record -o "$W/torch.json" -- python3 "$HERE/torch_copies.py" 2>"$OUT/torch_record.err")
tail -2 "$OUT/torch_record.err"; check torch "$exp" "$W/torch.json"
echo "== PyTorch known copies, with --page-faults"
exp=$("$BIN/tracer" record --page-faults -o "$W/torch_pf.json" -- python3 "$HERE/torch_copies.py" 2>"$OUT/torch_pf_record.err")
tail -2 "$OUT/torch_pf_record.err"; check torch-page-faults "$exp" "$W/torch_pf.json"
echo "== nvcc program, static cudart"
nvcc -O2 -o "$W/static_copies" "$HERE/static_copies.cu" && \
exp=$("$BIN/tracer" record -o "$W/static.json" -- "$W/static_copies" 50 2>"$OUT/static_record.err")
tail -2 "$OUT/static_record.err"; check static "$exp" "$W/static.json"
echo "== transfer-bench, real CUDA"
tb=$("$BIN/tracer" record -o "$W/tb.json" -- "$BIN/transfer-bench" --cudart "$CUDART" --size 4M 2>"$OUT/tb_record.err")
exp=$(python3 -c "import json,sys; s=json.loads(sys.argv[1]); print(json.dumps({'h2d': s['copies']//2, 'd2h': s['copies']//2, 'bytes_per_copy': s['size']}))" "$tb")
tail -2 "$OUT/tb_record.err"; check transfer-bench "$exp" "$W/tb.json"
cp "$W/torch.json" "$W/torch_pf.json" "$W/static.json" "$OUT/" 2>/dev/null

echo "== overhead per traced call: transfer-bench, 4-byte copies, untraced and traced interleaved"
for i in $(seq "$RUNS"); do
  u=$("$BIN/transfer-bench" --cudart "$CUDART" --size 4 --hot 1 --cold 0 --transfers 20000)
  t=$("$BIN/tracer" record -o "$W/o.hotpin" -- "$BIN/transfer-bench" --cudart "$CUDART" --size 4 --hot 1 --cold 0 --transfers 20000 2>>"$OUT/overhead.err")
  echo "{\"run\": $i, \"untraced\": $u, \"traced\": $t}" | tee -a "$OUT/overhead.jsonl" | cut -c1-200
done
echo "== PyTorch loop: untraced and traced interleaved"
for i in $(seq "$RUNS"); do
  u=$(python3 "$HERE/torch_loop.py" 300)
  t=$("$BIN/tracer" record -o "$W/l.hotpin" -- python3 "$HERE/torch_loop.py" 300 2>>"$OUT/loop.err")
  p=$("$BIN/tracer" record --page-faults -o "$W/lp.hotpin" -- python3 "$HERE/torch_loop.py" 300 2>>"$OUT/loop_pf.err")
  echo "{\"run\": $i, \"untraced\": $u, \"traced\": $t, \"traced_page_faults\": $p}" | tee -a "$OUT/loop.jsonl"
done
