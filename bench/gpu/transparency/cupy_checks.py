"""Unmodified CuPy program that checks its own results: numpy (pageable) memory used as CUDA's
rules for pageable memory allow, and pinned memory where the program asks for it. No hotpin
code.

Checks (each step counted; a mismatch is a step whose data was wrong):
- asarray_overwrite: cp.asarray(np_src) inside a non-default stream, np_src overwritten at
  once. CuPy stages a pageable source through a pinned buffer of its own, but copies a
  source it finds pinned directly and asynchronously.
- set_overwrite: gpu.set(np_src, stream=s) (cudaMemcpyAsync from the numpy memory),
  np_src overwritten at once: a copy from pageable memory has staged the source on return.
- get_blocking: cp.asnumpy(g, stream=s) (blocking, the default) read at once; a control.
- get_out_nonblocking: g.get(stream=s, out=buf, blocking=False) into a reused pageable numpy
  buffer, read at once: a copy into pageable memory is complete on return (CuPy's docstring
  for `out`: "In order to enable asynchronous copy, the underlying memory should be a pinned
  memory").
- asnumpy_fresh_nonblocking: cp.asnumpy(g, stream=s, blocking=False) into a fresh array CuPy
  allocates, read at once.
- free_then_alloc: set() from a numpy array, the array deleted, a new one of the same size
  allocated and filled at once; the GPU copy must hold the first one's data.
- empty_pinned: a cupyx.empty_pinned buffer copied asynchronously, checked after sync.
- graph_pinned: a CUDA graph capturing copies (cudaMemcpyAsync through cupy.cuda.runtime:
  CuPy's set()/get() refuse a capturing stream) from and to cupyx.empty_pinned buffers and
  a computation, replayed with new inputs.

Before each asynchronous copy the stream is kept busy (a spinning kernel), so that a copy that
is really asynchronous has not started when the program touches the memory.
Prints one JSON line like torch_checks.py. Exits 1 if a check raised, else 0."""
import time

WALL0 = time.perf_counter()

import sys  # noqa: E402

import cupy as cp  # noqa: E402
import cupyx  # noqa: E402
import numpy as np  # noqa: E402

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 12
N = 8 << 20  # int32 elements: 32 MiB buffers
DELAY_CYCLES = 20_000_000  # ~11 ms of GPU spin at 1.75 GHz

from tally import count, d2h, h2d, observed, run_all, salt  # noqa: E402,F401

_spin = cp.RawKernel(r'''
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
''', "spin")


def busy():
    """Keeps the current stream busy, so what is queued next on it waits."""
    _spin((1,), (1,), (np.int64(DELAY_CYCLES),))


def memory_type(ptr):
    """cudaPointerGetAttributes' type for a host address (0 unregistered, 1 host), or the
    error it raised."""
    try:
        a = cp.cuda.runtime.pointerGetAttributes(ptr)
    except Exception as e:  # noqa: BLE001
        return f"error: {type(e).__name__}: {e}"[:120]
    t = getattr(a, "type", None)
    if t is None:
        t = getattr(a, "memoryType", None)
    return int(t) if t is not None else None


def program_memory_type(ptr):
    """The driver's cuPointerGetAttribute(MEMORY_TYPE) for a host address, asked by the
    program itself through ctypes, not through CuPy (0 unregistered, 1 host, else "rc N"):
    what every caller but a framework on hotpin's list is told (docs/transparency.md)."""
    import ctypes
    driver = ctypes.CDLL("libcuda.so.1")
    value = ctypes.c_uint(0)
    rc = driver.cuPointerGetAttribute(ctypes.byref(value), ctypes.c_int(2), ctypes.c_uint64(ptr))
    if rc == 1:  # CUDA_ERROR_INVALID_VALUE: memory CUDA does not know, as for pageable memory
        return 0
    return int(value.value) if rc == 0 else f"rc {rc}"


def observe(key, ptr):
    """What CuPy's question about `ptr` is told (key), and what the program's own is (key +
    "_program")."""
    observed[key] = memory_type(ptr)
    observed[key + "_program"] = program_memory_type(ptr)


def gpu_matches(g, dev_base, k):
    """Whether g == dev_base + k, and how many elements differ (on the current stream)."""
    bad = int(cp.count_nonzero(g != dev_base + k).get())
    return bad == 0, bad


def check_asarray_overwrite(s, base, dev_base):
    src = np.empty(N, dtype=np.int32)  # pageable, reused
    for step in range(STEPS):
        k = salt(step, 1)
        np.add(base, k, out=src)
        with s:
            busy()
            g = cp.asarray(src)
            h2d(src.nbytes)
            src.fill(-1)  # CuPy copied a pageable source into its own staging buffer
            s.synchronize()
            ok, bad = gpu_matches(g, dev_base, k)
        count("asarray_overwrite", ok, "" if ok else f"step {step}: {bad} bad")
        del g
    observe("asarray_src_memory_type", src.ctypes.data)


def check_set_overwrite(s, base, dev_base):
    src = np.empty(N, dtype=np.int32)  # pageable, reused
    g = cp.empty(N, dtype=cp.int32)
    for step in range(STEPS):
        k = salt(step, 2)
        np.add(base, k, out=src)
        with s:
            busy()
            g.set(src, stream=s)
            h2d(src.nbytes)
            src.fill(-1)  # allowed at once: a copy from pageable memory staged it
            s.synchronize()
            ok, bad = gpu_matches(g, dev_base, k)
        count("set_overwrite", ok, "" if ok else f"step {step}: {bad} bad")
    observe("set_src_memory_type", src.ctypes.data)


def host_matches(h, base, k):
    bad = int(np.count_nonzero((h - base) != k))
    return bad == 0, bad


def check_get(s, base, dev_base):
    buf = np.empty(N, dtype=np.int32)  # pageable, reused
    buf.fill(0)
    for step in range(STEPS):
        with s:
            k = salt(step, 3)
            g = dev_base + k
            busy()
            h = cp.asnumpy(g, stream=s)  # blocking (the default)
            d2h(h.nbytes)
            ok, bad = host_matches(h, base, k)
            count("get_blocking", ok, "" if ok else f"step {step}: {bad} bad")

            k = salt(step, 4)
            g = dev_base + k
            busy()
            g.get(stream=s, out=buf, blocking=False)
            d2h(buf.nbytes)
            ok, bad = host_matches(buf, base, k)  # at once: pageable out, complete on return
            count("get_out_nonblocking", ok, "" if ok else f"step {step}: {bad} bad")
            s.synchronize()

            k = salt(step, 5)
            g = dev_base + k
            busy()
            h = cp.asnumpy(g, stream=s, blocking=False)  # a fresh numpy array
            d2h(h.nbytes)
            ok, bad = host_matches(h, base, k)
            count("asnumpy_fresh_nonblocking", ok, "" if ok else f"step {step}: {bad} bad")
            s.synchronize()
            del h, g
    observe("get_out_memory_type", buf.ctypes.data)


def check_free_then_alloc(s, base, dev_base):
    g = cp.empty(N, dtype=cp.int32)
    for step in range(STEPS):
        k = salt(step, 6)
        a = np.empty(N, dtype=np.int32)
        np.add(base, k, out=a)
        with s:
            busy()
            g.set(a, stream=s)
            h2d(a.nbytes)
            del a  # allowed: a copy from pageable memory staged it
            b = np.empty(N, dtype=np.int32)
            b.fill(-7)
            s.synchronize()
            ok, bad = gpu_matches(g, dev_base, k)
        count("free_then_alloc", ok, "" if ok else f"step {step}: {bad} bad")
        del b


def check_empty_pinned(s, base, dev_base):
    p = cupyx.empty_pinned((N,), dtype=np.int32)
    observe("empty_pinned_memory_type", p.ctypes.data)
    g = cp.empty(N, dtype=cp.int32)
    for step in range(STEPS):
        k = salt(step, 7)
        np.add(base, k, out=p)
        with s:
            busy()
            g.set(p, stream=s)
            h2d(p.nbytes)
            s.synchronize()  # pinned source: not to be written before the copy is done
            ok, bad = gpu_matches(g, dev_base, k)
        count("empty_pinned", ok, "" if ok else f"step {step}: {bad} bad")


def check_graph_pinned(s, base):
    hin = cupyx.empty_pinned((N,), dtype=np.int32)
    hout = cupyx.empty_pinned((N,), dtype=np.int32)
    gin = cp.empty(N, dtype=cp.int32)
    gout = cp.empty(N, dtype=cp.int32)
    small = base % 100000
    hin[:] = small
    rt = cp.cuda.runtime

    def work():
        # CuPy's set()/get() refuse to run while the stream captures: the runtime's copy.
        rt.memcpyAsync(gin.data.ptr, hin.ctypes.data, hin.nbytes, rt.memcpyHostToDevice, s.ptr)
        cp.multiply(gin, 2, out=gout)
        cp.add(gout, 1, out=gout)
        rt.memcpyAsync(hout.ctypes.data, gout.data.ptr, hout.nbytes, rt.memcpyDeviceToHost, s.ptr)

    with s:  # warm-up: kernels compiled and loaded before the capture
        work()
        s.synchronize()
        s.begin_capture()
        work()
        graph = s.end_capture()
    for r in range(max(5, STEPS // 2)):
        k = (r + 1) * 7
        np.add(small, k, out=hin)
        hout.fill(-1)
        graph.launch(stream=s)
        h2d(hin.nbytes)
        d2h(hout.nbytes)
        s.synchronize()
        want = (small + k) * 2 + 1
        bad = int(np.count_nonzero(hout != want))
        count("graph_pinned", bad == 0, "" if bad == 0 else f"replay {r}: {bad} bad")


def main():
    s = cp.cuda.Stream(non_blocking=True)
    base = np.arange(N, dtype=np.int32)
    dev_base = cp.arange(N, dtype=cp.int32)
    with s:
        busy()  # compiles and loads the spinning kernel
        s.synchronize()
    cp.cuda.Device(0).synchronize()
    start = time.perf_counter()
    def recover():
        if s.is_capturing():
            s.end_capture()
        cp.cuda.Device(0).synchronize()

    observe("numpy_fresh_memory_type", np.ones(N, dtype=np.int32).ctypes.data)
    return run_all("cupy_checks", STEPS, WALL0, start, [
        ("asarray_overwrite", check_asarray_overwrite, (s, base, dev_base)),
        ("set_overwrite", check_set_overwrite, (s, base, dev_base)),
        ("get", check_get, (s, base, dev_base)),
        ("free_then_alloc", check_free_then_alloc, (s, base, dev_base)),
        ("empty_pinned", check_empty_pinned, (s, base, dev_base)),
        ("graph_pinned", check_graph_pinned, (s, base)),
    ], recover=recover)

if __name__ == "__main__":
    sys.exit(main())
