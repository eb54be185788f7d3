#!/usr/bin/env bash
# The copy-hook benchmark: ns per cuMemcpyHtoDAsync_v2 against a do-nothing driver
# (null_cuda.c, NOT CUDA), plain vs under the interposer in pin-all mode with one block
# promoted, interleaved, RUNS each; prints the medians and what the hook adds, for a copy of
# memory hotpin did not change (an interval lookup) and for one of the promoted block (lookup
# plus the wait, which returns at once here).
# Usage: bash preload/benches/copy_hook.sh [RUNS] [CALLS]   (after cargo build --release)
set -eu
RUNS=${1:-7}
CALLS=${2:-5000000}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LIB=${LIB:-$ROOT/target/release/libhotpin_preload.so}
W=$(mktemp -d)
for so in libcudart.so.13 libcuda.so.1; do
  cc -O2 -fPIC -shared -fvisibility=hidden -Wl,-soname,$so -o "$W/$so" "$ROOT/preload/benches/null_cuda.c"
done
cc -O2 -o "$W/copy_hook" "$ROOT/preload/benches/copy_hook.c" "$W/libcudart.so.13" "$W/libcuda.so.1" -Wl,-rpath,"$W"
plain=() preload=()
for _ in $(seq "$RUNS"); do
  plain+=("$("$W/copy_hook" "$CALLS")")
  preload+=("$(HOTPIN_MODE=pin-all LD_PRELOAD=$LIB LD_LIBRARY_PATH=$W "$W/copy_hook" "$CALLS")")
done
python3 - "$(printf '%s;' "${plain[@]}")" "$(printf '%s;' "${preload[@]}")" <<'PY'
import statistics, sys
def runs(text):
    rows = [r.split() for r in text.split(";") if r.strip()]
    return [float(r[0]) for r in rows], [float(r[1]) for r in rows]
po, ph = runs(sys.argv[1])
qo, qh = runs(sys.argv[2])
for name, p, q in (("memory hotpin did not change", po, qo), ("the promoted block", ph, qh)):
    mp, mq = statistics.median(p), statistics.median(q)
    print(f"{name}: plain {mp:.2f} ns, interposed {mq:.2f} ns, added {mq - mp:.2f} ns per copy "
          f"(median of {len(p)}, interleaved; runs plain {p}, interposed {q})")
PY
