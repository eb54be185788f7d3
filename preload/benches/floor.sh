#!/usr/bin/env bash
# The malloc-floor benchmark: ns per malloc/free pair below the floor, plain libc vs under the
# interposer (in use mode with an empty pin-all setting, so the floor check is what runs),
# interleaved, RUNS each; prints the medians and the difference.
# Usage: bash preload/benches/floor.sh [RUNS] [PAIRS]   (after cargo build --release)
set -eu
RUNS=${1:-7}
PAIRS=${2:-20000000}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LIB=${LIB:-$ROOT/target/release/libhotpin_preload.so}
W=$(mktemp -d)
cc -O2 -o "$W/floor" "$ROOT/preload/benches/floor.c"
plain=() preload=()
for _ in $(seq "$RUNS"); do
  plain+=("$("$W/floor" "$PAIRS")")
  preload+=("$(HOTPIN_MODE=pin-all LD_PRELOAD=$LIB "$W/floor" "$PAIRS")")
done
python3 - "${plain[*]}" "${preload[*]}" <<'PY'
import statistics, sys
plain = [float(x) for x in sys.argv[1].split()]
pre = [float(x) for x in sys.argv[2].split()]
p, q = statistics.median(plain), statistics.median(pre)
print(f"plain libc   {p:.2f} ns per malloc+free (runs: {plain})")
print(f"interposed   {q:.2f} ns per malloc+free (runs: {pre})")
print(f"added        {q - p:.2f} ns per pair (median of {len(plain)}, interleaved)")
PY
