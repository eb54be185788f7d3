"""Online decisions, JAX program: a loop that puts NumPy batches on the GPU. No hotpin code.

- hot: 4 NumPy batches of 64 MiB; every step two of them (step % 4 and (step + 1) % 4) are
  put on the GPU with jax.device_put(batch, device), so each is copied every other step and
  consecutive steps see different pairs (a copy that did not happen, or read stale memory,
  gives a wrong result);
- result: a 32 MiB result (a jitted function of both batches and a step counter kept on the
  GPU) brought back every step with numpy.asarray(result), into a fresh NumPy array.

What CUDA sees: JAX reaches CUDA through the driver only; XLA copies pageable host memory
through a pinned bounce buffer of its own, and copies directly from memory that it knows to
be pinned (docs/transparency.md: hotpin's promotions are hidden from it).

BY_HAND=1 is the version a user pins by hand. JAX has no API to pin a NumPy array; what it
has is the "pinned_host" memory kind: the 4 batches are put once into pinned host memory
(jax.device_put(batch, SingleDeviceSharding(device, memory_kind="pinned_host"))) and every
step moved from there to the GPU (jax.device_put(pinned, SingleDeviceSharding(device,
memory_kind="device"))); each result is moved to pinned host memory the same way
(jax.device_put(result, ...memory_kind="pinned_host")) and read there with numpy.asarray, which
gives a view of that memory, no copy (on the H100 with JAX 0.11.2: 1.2 ms for 32 MiB, against
29 ms for numpy.asarray of the result on the GPU; 1.7 ms against 14 ms for a 64 MiB batch).
If this JAX has no pinned_host memory (the setting-up raises, or its check fails), BY_HAND
runs the plain version: "by_hand_unavailable" says why and pinned_by_hand_bytes is 0.
pinned_by_hand_bytes: 4 x 64 MiB + 32 MiB (0 without BY_HAND).

Sets XLA_PYTHON_CLIENT_PREALLOCATE=false before importing JAX (XLA then takes device memory
as it needs it, not 75% of it at start-up).
Prints one JSON line: its own ground truth (copies and bytes per direction; the compile
step's copies counted, the set-up of pinned_host batches counted apart), `seconds` (from the
first host allocation to the end of the loop; checks not counted), `loop_seconds` (the steps
alone), checks and mismatches. Checks (every 4th step and the last; not timed): the result in
full against NumPy's (exact: integers and halves below 2**23).
Usage: python3 jax_loop.py [steps]   (default 80)"""
import os

os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import numpy  # noqa: E402
from jax.sharding import SingleDeviceSharding  # noqa: E402

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 80
by_hand = os.environ.get("BY_HAND") == "1"
NB = 4
BATCH_FLOATS = 16 << 20  # 64 MiB
OUT_FLOATS = 8 << 20  # 32 MiB
f32 = numpy.float32
dev = jax.devices("gpu")[0]
on_device = SingleDeviceSharding(dev, memory_kind="device")
step_fn = jax.jit(lambda x, z, s: (x[:OUT_FLOATS] * f32(2) + z[OUT_FLOATS:] - s * f32(0.5),
                                   s + f32(1)))
unavailable = None
if by_hand:
    try:  # does this JAX have pinned host memory that device_put moves to the GPU?
        on_host = SingleDeviceSharding(dev, memory_kind="pinned_host")
        probe = numpy.arange(1 << 16, dtype=f32)
        held = jax.device_put(probe, on_host)
        held.block_until_ready()
        if held.sharding.memory_kind != "pinned_host":
            raise RuntimeError(f"device_put to pinned_host gave {held.sharding.memory_kind}")
        back = jax.device_put(held, on_device)
        if back.sharding.memory_kind != "device":
            raise RuntimeError(f"device_put to device gave {back.sharding.memory_kind}")
        again = jax.device_put(back * f32(2), on_host)
        if again.sharding.memory_kind != "pinned_host":
            raise RuntimeError(f"device_put to pinned_host gave {again.sharding.memory_kind}")
        if not numpy.array_equal(numpy.asarray(again), probe * f32(2)):
            raise RuntimeError("pinned_host round trip changed the values")
        del probe, held, back, again
    except Exception as e:  # noqa: BLE001 - any failure means: no by-hand version here
        unavailable = f"{type(e).__name__}: {e}"[:300]
        by_hand = False


def pattern(n, salt):
    return (numpy.arange(n, dtype=numpy.int32) % 4099 + 1000 * salt).astype(f32)


# Compile outside the timed part (one copy each way, counted).
warm_in = numpy.zeros(BATCH_FLOATS, dtype=f32)
counter = jax.device_put(f32(0), dev)
target = on_device if by_hand else dev  # where the loop's puts go
warm = numpy.asarray(step_fn(jax.device_put(warm_in, target), jax.device_put(warm_in, target),
                             counter)[0])
h2d, d2h = 3, 1
h2d_bytes, d2h_bytes = 2 * warm_in.nbytes + 4, warm.nbytes
del warm_in, warm
pinned_host_puts = 0
checks = mismatches = 0
check_seconds = 0.0
start = time.perf_counter()
batches = [pattern(BATCH_FLOATS, i) for i in range(NB)]
if by_hand:
    sources = [jax.device_put(b, on_host) for b in batches]
    for s in sources:
        s.block_until_ready()
    pinned_host_puts = NB
else:
    sources = batches
loop_start = time.perf_counter()
for step in range(steps):
    a, b = step % NB, (step + 1) % NB
    x = jax.device_put(sources[a], target)
    z = jax.device_put(sources[b], target)
    h2d += 2
    h2d_bytes += 2 * BATCH_FLOATS * 4
    out, counter = step_fn(x, z, counter)
    if by_hand:
        result = numpy.asarray(jax.device_put(out, on_host))  # a view of pinned host memory
    else:
        result = numpy.asarray(out)  # a fresh NumPy array every step
    d2h += 1
    d2h_bytes += result.nbytes
    if step % 4 == 0 or step == steps - 1:
        began = time.perf_counter()
        expected = (batches[a][:OUT_FLOATS] * f32(2) + batches[b][OUT_FLOATS:]
                    - f32(step) * f32(0.5))
        checks += 1
        mismatches += int(not numpy.array_equal(result, expected))
        check_seconds += time.perf_counter() - began
end = time.perf_counter()
pinned = (NB * BATCH_FLOATS + OUT_FLOATS) * 4 if by_hand else 0
line = {"program": "jax_loop", "steps": steps, "by_hand": by_hand, "jax": jax.__version__,
        "seconds": end - start - check_seconds,
        "loop_seconds": end - loop_start - check_seconds,
        "h2d": h2d, "h2d_bytes": h2d_bytes, "d2h": d2h, "d2h_bytes": d2h_bytes,
        "pinned_host_puts": pinned_host_puts,
        "checks": checks, "mismatches": mismatches,
        "pinned_by_hand_bytes": pinned, "pinned_requested_bytes": pinned}
if unavailable:
    line["by_hand_unavailable"] = unavailable
print(json.dumps(line))
