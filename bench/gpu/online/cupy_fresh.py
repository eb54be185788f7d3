"""Online decisions, CuPy program: fresh NumPy arrays every step. No hotpin code.

- each step makes 3 new NumPy arrays of 64 MiB (a batch built on the CPU: a pattern salted by
  the step) and puts them on the GPU with cupy.asarray; each is used once and dropped;
- result: a 32 MiB result brought back every step with cupy.asnumpy(y), into a fresh array.

What CUDA sees: each fresh pageable array is copied on the CPU into a buffer of CuPy's pinned
pool (a portable cudaHostAlloc, asked for at the first step and reused) and that buffer is
copied to the GPU. No array is copied twice, so what makes the program as fast as it is is
that staging buffer being pinned: the case hotpin must not slow down by letting the pool's
buffers go (#44, docs/transparency.md "Its staging buffers").

BY_HAND=1 is the version a user pins by hand: the batches are built straight into 3 pinned
arrays (cupyx.empty_pinned) reused every step and put on the GPU with ndarray.set, the
result into one pinned array (y.get(out=pinned)). pinned_by_hand_bytes: 3 x 64 MiB + 32 MiB.

Prints one JSON line, as cupy_numpy.py does. Checks (every 4th step and the last; not timed):
each array on the GPU in full against the values computed on the GPU, and the result in full
against NumPy's.
Usage: python3 cupy_fresh.py [steps]   (default 60)"""
import json
import os
import sys
import time

import cupy
import cupyx
import numpy

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 60
by_hand = os.environ.get("BY_HAND") == "1"
HOT = 3
HOT_FLOATS = 16 << 20  # 64 MiB
OUT_FLOATS = 8 << 20  # 32 MiB
f32 = numpy.float32
cupy.zeros(1, dtype=f32)
cupy.cuda.Device(0).synchronize()  # the CUDA context, outside the timed part
base = [(numpy.arange(HOT_FLOATS, dtype=numpy.int32) % 4099 + 16 * i).astype(f32) for i in range(HOT)]


def batch(i, step, out=None):
    """Array i of this step's batch: the base pattern plus the step (exact in float32)."""
    return numpy.add(base[i], f32(step), out=out)


h2d = d2h = h2d_bytes = d2h_bytes = 0
checks = mismatches = 0
check_seconds = 0.0
if by_hand:
    pinned = [cupyx.empty_pinned((HOT_FLOATS,), dtype=f32) for _ in range(HOT)]
    out_pinned = cupyx.empty_pinned((OUT_FLOATS,), dtype=f32)
cupy.cuda.Device(0).synchronize()
start = time.perf_counter()
for step in range(steps):
    if by_hand:
        xs = []
        for i in range(HOT):
            batch(i, step, out=pinned[i])
            x = cupy.empty((HOT_FLOATS,), dtype=f32)
            x.set(pinned[i])
            xs.append(x)
    else:
        xs = [cupy.asarray(batch(i, step)) for i in range(HOT)]
    h2d += HOT
    h2d_bytes += HOT * HOT_FLOATS * 4
    y = xs[0][:OUT_FLOATS] * f32(2) + xs[1][OUT_FLOATS:] - xs[2][:OUT_FLOATS] * f32(0.5)
    if by_hand:
        y.get(out=out_pinned)
        result = out_pinned
    else:
        result = cupy.asnumpy(y)
    d2h += 1
    d2h_bytes += OUT_FLOATS * 4
    if step % 4 == 0 or step == steps - 1:
        began = time.perf_counter()
        for i, x in enumerate(xs):
            expected = cupy.asarray(base[i]) + f32(step)
            checks += 1
            mismatches += int(not bool(cupy.array_equal(x, expected)))
        expected = (batch(0, step)[:OUT_FLOATS] * f32(2) + batch(1, step)[OUT_FLOATS:]
                    - batch(2, step)[:OUT_FLOATS] * f32(0.5))
        checks += 1
        mismatches += int(not numpy.array_equal(result, expected))
        check_seconds += time.perf_counter() - began
cupy.cuda.Device(0).synchronize()
end = time.perf_counter()
pinned_bytes = (HOT * HOT_FLOATS + OUT_FLOATS) * 4 if by_hand else 0
print(json.dumps({"program": "cupy_fresh", "steps": steps, "by_hand": by_hand,
                  "cupy": cupy.__version__,
                  "seconds": end - start - check_seconds,
                  "loop_seconds": end - start - check_seconds,
                  "h2d": h2d, "h2d_bytes": h2d_bytes, "d2h": d2h, "d2h_bytes": d2h_bytes,
                  "checks": checks, "mismatches": mismatches,
                  "pinned_by_hand_bytes": pinned_bytes, "pinned_requested_bytes": pinned_bytes}))
