"""Unmodified JAX program that checks its own results. JAX reaches CUDA through the driver
only and copies pageable numpy memory through pinned buffers of its own, but copies memory
it finds pinned directly. The program follows JAX's rule: an array passed to device_put is
not written until the transfer is done (block_until_ready). No hotpin code.

Checks (each step counted; a mismatch is a step whose result was wrong):
- put_compute_get: a reused numpy buffer put on the GPU, waited for, then overwritten (allowed
  once ready); jit(x * 2 + k) computed and brought back with np.asarray, compared with NumPy.
- fresh_put_free_alloc: a fresh numpy array each step, put, waited for, deleted, a new one of
  the same size allocated and filled at once; the result must come from the first one.
- d2h_async_then_read: y.copy_to_host_async() then np.asarray(y), read at once.
- asarray_at_once: np.asarray of a device array, read at once.
- pinned_host (optional): a round trip through JAX's pinned_host memory kind; on a JAX that
  does not support it, "pinned_host_supported" is false under "observed" and nothing counts.

Prints one JSON line like torch_checks.py. Exits 1 if a check raised, else 0."""
import time

WALL0 = time.perf_counter()

import sys  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 12
N = 8 << 20  # int32 elements: 32 MiB buffers

from tally import count, d2h, h2d, observed, run_all, salt  # noqa: E402,F401


@jax.jit
def f(x, k):
    return x * 2 + k


def compare(got, base, k, step):
    want = base * 2 + k  # int32, exact: base < 2**23, k < 2**20
    bad = int(np.count_nonzero(got != want))
    return bad == 0, "" if bad == 0 else f"step {step}: {bad} bad"


def check_put_compute_get(dev, base):
    src = np.empty(N, dtype=np.int32)  # reused
    for step in range(STEPS):
        k = salt(step, 1)
        np.add(base, k, out=src)
        x = jax.device_put(src, dev)
        h2d(src.nbytes)
        x.block_until_ready()
        src.fill(-1)  # allowed: the transfer is done
        y = f(x, np.int32(step))
        r = np.asarray(y)
        d2h(r.nbytes)
        ok, info = compare(r, base + k, step, step)
        count("put_compute_get", ok, info)
        del x, y, r


def check_fresh_put_free_alloc(dev, base):
    for step in range(STEPS):
        k = salt(step, 2)
        a = base + k  # fresh numpy array
        x = jax.device_put(a, dev)
        h2d(a.nbytes)
        x.block_until_ready()
        del a
        b = np.empty(N, dtype=np.int32)
        b.fill(-7)
        y = f(x, np.int32(step))
        r = np.asarray(y)
        d2h(r.nbytes)
        ok, info = compare(r, base + k, step, step)
        count("fresh_put_free_alloc", ok, info)
        del x, y, r, b


def check_d2h(dev, base):
    xb = jax.device_put(base, dev)
    h2d(base.nbytes)
    xb.block_until_ready()
    for step in range(STEPS):
        k = salt(step, 3)
        y = f(xb, np.int32(k))
        y.copy_to_host_async()
        r = np.asarray(y)
        d2h(r.nbytes)
        ok, info = compare(r, base, k, step)
        count("d2h_async_then_read", ok, info)
        k = salt(step, 4)
        r = np.asarray(f(xb, np.int32(k)))  # read at once
        d2h(r.nbytes)
        ok, info = compare(r, base, k, step)
        count("asarray_at_once", ok, info)
        del y, r


def check_pinned_host(dev, base):
    try:
        from jax.sharding import SingleDeviceSharding
        pinned = SingleDeviceSharding(dev, memory_kind="pinned_host")
        on_device = SingleDeviceSharding(dev, memory_kind="device")
        probe = jax.device_put(np.zeros(16, dtype=np.int32), pinned)
        probe.block_until_ready()
    except Exception as e:  # noqa: BLE001
        observed["pinned_host_supported"] = False
        observed["pinned_host_why"] = f"{type(e).__name__}: {e}"[:200]
        return
    observed["pinned_host_supported"] = True
    for step in range(max(4, STEPS // 2)):
        k = salt(step, 5)
        a = base + k
        h = jax.device_put(a, pinned)
        h2d(a.nbytes)
        d = jax.device_put(h, on_device)
        r = np.asarray(f(d, np.int32(step)))
        d2h(r.nbytes)
        ok, info = compare(r, base + k, step, step)
        count("pinned_host", ok, info)
        del a, h, d, r


def main():
    dev = jax.devices("gpu")[0]
    base = np.arange(N, dtype=np.int32)
    # Compile once outside the timed part.
    np.asarray(f(jax.device_put(base, dev), np.int32(0)))
    start = time.perf_counter()
    observed["jax_version"] = jax.__version__
    return run_all("jax_checks", STEPS, WALL0, start, [
        ("put_compute_get", check_put_compute_get, (dev, base)),
        ("fresh_put_free_alloc", check_fresh_put_free_alloc, (dev, base)),
        ("d2h", check_d2h, (dev, base)),
        ("pinned_host", check_pinned_host, (dev, base)),
    ])

if __name__ == "__main__":
    sys.exit(main())
