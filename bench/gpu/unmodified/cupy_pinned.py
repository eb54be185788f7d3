"""Unmodified CuPy program: host staging buffers from cupyx.empty_pinned (CuPy's pinned
memory pool, which calls cudaHostAlloc through CuPy's runtime binding, looked up with dlsym).
One 64 MiB buffer is copied to and from the GPU every step; eight more of 64 MiB are set up
as spares and never copied. No hotpin code. Prints its own ground truth, its time
(allocation included) and the check of what it computed (the hot buffer at the end: every
element 2**steps, exactly; not timed)."""
import json
import sys
import time

import cupy
import cupyx
import numpy

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
floats = 16 << 20  # 64 MiB
cupy.cuda.Device(0).synchronize()
start = time.perf_counter()
hot = cupyx.empty_pinned((floats,), dtype=numpy.float32)
spares = [cupyx.empty_pinned((floats,), dtype=numpy.float32) for _ in range(8)]
for spare in spares:
    spare.fill(0)
hot.fill(1)
device = cupy.empty((floats,), dtype=cupy.float32)
h2d = d2h = h2d_bytes = d2h_bytes = 0
for step in range(steps):
    device.set(hot)
    h2d += 1
    h2d_bytes += hot.nbytes
    device *= 2
    device.get(out=hot)
    d2h += 1
    d2h_bytes += hot.nbytes
cupy.cuda.Device(0).synchronize()
seconds = time.perf_counter() - start
mismatches = int(not bool(numpy.all(hot == numpy.float32(2.0**steps))))
print(json.dumps({"program": "cupy_pinned", "steps": steps, "seconds": seconds,
                  "h2d": h2d, "h2d_bytes": h2d_bytes, "d2h": d2h, "d2h_bytes": d2h_bytes,
                  "checks": 1, "mismatches": mismatches}))
