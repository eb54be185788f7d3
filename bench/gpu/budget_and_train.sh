#!/usr/bin/env bash
# Two GPU measurements for docs/bench/history.md:
#  1. The original's pre-pinned variant: 4 GiB pinned by the program before anything else and
#     held, then transfer-bench at 64 MiB (2 hot buffers, 25 cold) in use mode under pinned
#     budgets of none, 128 MiB (both hot buffers), 64 MiB (one) and 0, beside unpinned and
#     fully pinned; runs interleaved.
#  2. A training-like PyTorch program (torch_train.py) on hotpin through its C ABI: profiled
#     under the tracer, reported, then run in pin-none, pin-all and use mode, interleaved.
# Needs root, python3 with PyTorch; tracer, transfer-bench and libhotpin.so in $BIN.
# Usage: BIN=dir OUT=dir bench/gpu/budget_and_train.sh [runs]
set -u
BIN=${BIN:-.device/bin}
OUT=${OUT:-/tmp/hotpin-out}
RUNS=${1:-3}
CUDART=/usr/local/cuda/targets/x86_64-linux/lib/libcudart.so.13
HERE=$(dirname "$0")
W=$(mktemp -d)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 RUST_BACKTRACE=0
nvidia-smi -L
emit() { # file config run json
  python3 -c "import json,sys; d=json.loads(sys.argv[3]); d['config']=sys.argv[1]; d['run']=int(sys.argv[2]); print(json.dumps(d))" "$2" "$3" "$4" | tee -a "$OUT/$1" | cut -c1-160
}

echo "== 1. pre-pinned 4 GiB, 64 MiB buffers, pinned budgets"
tb=(--cudart "$CUDART" --size 64M --hot 2 --transfers 175 --cold 25 --prepin 4G)
"$BIN/tracer" record -o "$W/tb.hotpin" -- "$BIN/transfer-bench" "${tb[@]}" --mode profile > /dev/null 2>>"$OUT/budget.err"
for run in $(seq "$RUNS"); do
  emit budget.jsonl unpinned "$run" "$("$BIN/transfer-bench" "${tb[@]}" --mode unpinned)"
  emit budget.jsonl pinned "$run" "$("$BIN/transfer-bench" "${tb[@]}" --mode pinned)"
  emit budget.jsonl use "$run" "$("$BIN/transfer-bench" "${tb[@]}" --mode use --history "$W/tb.hotpin")"
  for budget in 128M 64M 0; do
    emit budget.jsonl "use-budget-$budget" "$run" "$("$BIN/transfer-bench" "${tb[@]}" --mode use --history "$W/tb.hotpin" --pinned-budget "$budget")"
  done
done

echo "== 2. PyTorch training-like program"
export HOTPIN_LIB="$BIN/libhotpin.so" HOTPIN_CUDART="$CUDART"
HOTPIN_MODE=profile "$BIN/tracer" record -o "$W/train.hotpin" -- python3 "$HERE/torch_train.py" 200 64 > "$OUT/train_profile.json" 2> "$OUT/train_record.err"
cat "$OUT/train_profile.json"; tail -3 "$OUT/train_record.err"
"$BIN/tracer" report "$W/train.hotpin" > "$OUT/train_report.txt" 2>&1; head -60 "$OUT/train_report.txt"
cp "$W/train.hotpin" "$OUT/"
for run in $(seq "$RUNS"); do
  for mode in pin-none pin-all use; do
    emit train.jsonl "$mode" "$run" "$(HOTPIN_MODE=$mode HOTPIN_HISTORY="$W/train.hotpin" python3 "$HERE/torch_train.py" 200 64 2>>"$OUT/train.err")"
  done
done
tail -5 "$OUT/train.err"
