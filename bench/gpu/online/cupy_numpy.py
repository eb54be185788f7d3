"""Online decisions, CuPy program: a loop over NumPy arrays. No hotpin code.

- hot: 3 NumPy arrays of 64 MiB, put on the GPU every step with cupy.asarray(array); before
  each step the program writes the step number into the first and last 1024 elements of each;
- result: a 32 MiB result brought back every step with cupy.asnumpy(y), into a fresh NumPy
  array.

What CUDA sees: cupy.asarray of a NumPy array that is not pinned copies it on the CPU into a
buffer of CuPy's own pinned memory pool (cudaHostAlloc/cuMemHostAlloc, portable) and copies
that buffer to the GPU (CuPy 13 and later copy directly when the array's memory answers
"pinned" to cudaPointerGetAttributes, which hotpin's promotions never do: they stay hidden
from the program's questions, docs/transparency.md). cupy.asnumpy(y) without out= copies
straight into the fresh pageable array (cudaMemcpyAsync, then a stream synchronise).

BY_HAND=1 is the version a user pins by hand: the hot arrays live in pinned memory
(cupyx.empty_pinned, filled once), are put on the GPU with ndarray.set (a direct copy,
whatever CuPy's version), and the result is brought back into one pinned 32 MiB array reused
every step (y.get(out=pinned), blocking). pinned_by_hand_bytes: 3 x 64 MiB + 32 MiB (0 without
BY_HAND).

Prints one JSON line: its own ground truth (copies and bytes per direction; not counting the
copies into CuPy's staging buffers, which are CPU copies), `seconds` (from the first host
allocation to the end of the loop; checks not counted), `loop_seconds` (the steps alone),
checks and mismatches. Checks (every 4th step and the last; not timed): each hot array on the
GPU in full against the values computed on the GPU, and the result in full against NumPy's
(exact: small integers scaled by powers of two).
Usage: python3 cupy_numpy.py [steps]   (default 100)"""
import json
import os
import sys
import time

import cupy
import cupyx
import numpy

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
by_hand = os.environ.get("BY_HAND") == "1"
HOT = 3
HOT_FLOATS = 16 << 20  # 64 MiB
OUT_FLOATS = 8 << 20  # 32 MiB
MARK = 1024
f32 = numpy.float32
cupy.zeros(1, dtype=f32)
cupy.cuda.Device(0).synchronize()  # the CUDA context, outside the timed part


def pattern(n, salt, xp):
    return (xp.arange(n, dtype=xp.int32) % 4099 + 16 * salt).astype(xp.float32)


h2d = d2h = h2d_bytes = d2h_bytes = 0
checks = mismatches = 0
check_seconds = 0.0
start = time.perf_counter()
if by_hand:
    hot = []
    for i in range(HOT):
        p = cupyx.empty_pinned((HOT_FLOATS,), dtype=f32)
        p[...] = pattern(HOT_FLOATS, i, numpy)
        hot.append(p)
    out_pinned = cupyx.empty_pinned((OUT_FLOATS,), dtype=f32)
else:
    hot = [pattern(HOT_FLOATS, i, numpy) for i in range(HOT)]
cupy.cuda.Device(0).synchronize()
loop_start = time.perf_counter()
for step in range(steps):
    for h in hot:
        h[:MARK] = step
        h[-MARK:] = step
    if by_hand:
        xs = []
        for h in hot:
            x = cupy.empty((HOT_FLOATS,), dtype=f32)
            x.set(h)
            xs.append(x)
    else:
        xs = [cupy.asarray(h) for h in hot]
    h2d += HOT
    h2d_bytes += HOT * HOT_FLOATS * 4
    y = xs[0][:OUT_FLOATS] * f32(2) + xs[1][OUT_FLOATS:] - xs[2][:OUT_FLOATS] * f32(0.5) + f32(step)
    if by_hand:
        y.get(out=out_pinned)  # blocking: the stream is synchronised
        result = out_pinned
    else:
        result = cupy.asnumpy(y)  # a fresh NumPy array every step
    d2h += 1
    d2h_bytes += OUT_FLOATS * 4
    if step % 4 == 0 or step == steps - 1:
        began = time.perf_counter()
        for i, x in enumerate(xs):
            expected = pattern(HOT_FLOATS, i, cupy)
            expected[:MARK] = step
            expected[-MARK:] = step
            checks += 1
            mismatches += int(not bool(cupy.array_equal(x, expected)))
        expected = (hot[0][:OUT_FLOATS] * f32(2) + hot[1][OUT_FLOATS:]
                    - hot[2][:OUT_FLOATS] * f32(0.5) + f32(step))
        checks += 1
        mismatches += int(not numpy.array_equal(result, expected))
        check_seconds += time.perf_counter() - began
cupy.cuda.Device(0).synchronize()
end = time.perf_counter()
pinned = (HOT * HOT_FLOATS + OUT_FLOATS) * 4 if by_hand else 0
print(json.dumps({"program": "cupy_numpy", "steps": steps, "by_hand": by_hand,
                  "cupy": cupy.__version__,
                  "seconds": end - start - check_seconds,
                  "loop_seconds": end - loop_start - check_seconds,
                  "h2d": h2d, "h2d_bytes": h2d_bytes, "d2h": d2h, "d2h_bytes": d2h_bytes,
                  "checks": checks, "mismatches": mismatches,
                  "pinned_by_hand_bytes": pinned, "pinned_requested_bytes": pinned}))
