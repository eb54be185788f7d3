"""Unmodified JAX program: four 64 MiB numpy batches, reused, put on the GPU in turn every
step (jax.device_put), and a 32 MiB result brought back into a fresh numpy array
(numpy.asarray). JAX reaches CUDA through the driver only (no shared libcudart), so hotpin's
interposer sees it through dlsym and cuGetProcAddress. No hotpin code. Prints its own ground
truth (copies and bytes per direction), its time and the checks of what it computed (every
4th step and the last: the result against NumPy's, exactly; their time is not counted)."""
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
batch_floats = 16 << 20  # 64 MiB batches
out_floats = 8 << 20  # 32 MiB results
dev = jax.devices("gpu")[0]
batches = [numpy.full(batch_floats, i, dtype=numpy.float32) for i in range(4)]
step_fn = jax.jit(lambda x: (x[:out_floats] * 2.0 + 1.0))
# Compile outside the timed loop (one copy each way, counted).
warm = numpy.asarray(step_fn(jax.device_put(batches[0], dev)))
h2d, d2h = 1, 1
h2d_bytes, d2h_bytes = batches[0].nbytes, warm.nbytes
checks = mismatches = 0
check_seconds = 0.0
start = time.perf_counter()
for step in range(steps):
    x = jax.device_put(batches[step % 4], dev)
    h2d += 1
    h2d_bytes += batches[step % 4].nbytes
    result = numpy.asarray(step_fn(x))  # a fresh host array each step
    d2h += 1
    d2h_bytes += result.nbytes
    if step % 4 == 0 or step == steps - 1:
        began = time.perf_counter()
        expected = batches[step % 4][:out_floats] * numpy.float32(2.0) + numpy.float32(1.0)
        checks += 1
        mismatches += int(not numpy.array_equal(result, expected))
        check_seconds += time.perf_counter() - began
seconds = time.perf_counter() - start - check_seconds
print(json.dumps({"program": "jax_batches", "steps": steps, "seconds": seconds,
                  "h2d": h2d, "h2d_bytes": h2d_bytes, "d2h": d2h, "d2h_bytes": d2h_bytes,
                  "checks": checks, "mismatches": mismatches}))
