"""Node budget, the CuPy program: HOT host arrays of 64 MiB from CuPy's pinned memory pool
(`cupy.cuda.alloc_pinned_memory`, which asks cudaHostAlloc for portable memory), copied to the
GPU every step, and WORK_MS of GPU work between steps. What hotpin keeps pinned of it must be
leased like its own pins (#40 item 4). No hotpin code.

Each step writes the step number into the first and last 1024 elements of every array, copies
each to the GPU (`ndarray.set` on a stream), and checks every 4th step the copies in full
against values computed on the GPU (markers included), untimed.

Prints one JSON line, as hot_loop.py does.
Usage: python3 pool_loop.py STEPS HOT WORK_MS"""
import json
import sys
import time

import cupy
import numpy

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
HOT = int(sys.argv[2]) if len(sys.argv) > 2 else 4
work_ms = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
FLOATS = 16 << 20  # 64 MiB
MARK = 1024
stream = cupy.cuda.Stream(non_blocking=True)
a = cupy.random.standard_normal((2048, 2048), dtype=cupy.float32)
cupy.cuda.Device().synchronize()
began = time.perf_counter()
for _ in range(20):
    b = a @ a
cupy.cuda.Device().synchronize()
per_product = (time.perf_counter() - began) / 20
products = int(round(work_ms / 1000 / per_product)) if work_ms > 0 else 0


def pattern_gpu(salt):
    return (cupy.arange(FLOATS, dtype=cupy.int32) % 4099 + 16 * salt).astype(cupy.float32)


memories = [cupy.cuda.alloc_pinned_memory(FLOATS * 4) for _ in range(HOT)]
hot = [numpy.frombuffer(m, numpy.float32, FLOATS) for m in memories]
for i, h in enumerate(hot):
    h[:] = (numpy.arange(FLOATS, dtype=numpy.int32) % 4099 + 16 * i).astype(numpy.float32)
on_gpu = [cupy.empty(FLOATS, cupy.float32) for _ in range(HOT)]
h2d = h2d_bytes = checks = mismatches = 0
check_seconds = 0.0
start = time.perf_counter()
for step in range(steps):
    for h in hot:
        h[:MARK] = step
        h[-MARK:] = step
    for d, h in zip(on_gpu, hot):
        d.set(h, stream=stream)
    h2d += HOT
    h2d_bytes += HOT * FLOATS * 4
    with stream:
        for _ in range(products):
            b = a @ a
    stream.synchronize()
    if step % 4 == 0 or step == steps - 1:
        t0 = time.perf_counter()
        for i, x in enumerate(on_gpu):
            expected = pattern_gpu(i)
            expected[:MARK] = step
            expected[-MARK:] = step
            checks += 1
            mismatches += int(not bool(cupy.array_equal(x, expected)))
        check_seconds += time.perf_counter() - t0
seconds = time.perf_counter() - start - check_seconds
print(json.dumps({"program": "pool_loop", "steps": steps, "hot": HOT, "work_ms": work_ms,
                  "seconds": seconds, "h2d": h2d, "h2d_bytes": h2d_bytes, "d2h": 0,
                  "d2h_bytes": 0, "checks": checks, "mismatches": mismatches}))
