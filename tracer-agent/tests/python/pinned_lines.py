"""A Python program for the tracer's tests: pinned buffers made from known lines of its own,
through the CUDA runtime called with ctypes (in the tests, the CUDA stand-in: a test fixture,
not CUDA), then copied both ways. Its last line of stdout is its ground truth: each pinned
allocation's size, file, line and function with its caller's line and function, and its
copies and bytes by direction.
Usage: python3 pinned_lines.py LIBCUDART [GATE]  (with GATE: prints READY after its set-up,
then waits until the file GATE exists, at most 60 s). With LINGER_S=SECONDS in the
environment it lives that much longer after printing its truth."""
import ctypes
import json
import os
import sys
import time

H2D, D2H = 1, 2
cudart = ctypes.CDLL(sys.argv[1])
# The driver beside it: an allocation made at the driver's layer (as a framework's static
# CUDA runtime makes them: CuPy's pinned pool) carries its lines too.
driver = ctypes.CDLL(os.path.join(os.path.dirname(sys.argv[1]), "libcuda.so.1"))
truth = {"allocations": [], "h2d": 0, "d2h": 0, "h2d_bytes": 0, "d2h_bytes": 0}


def check(code):
    if code != 0:
        raise SystemExit(f"CUDA error {code}")


def pinned(size):
    ptr = ctypes.c_void_p()
    check(cudart.cudaMallocHost(ctypes.byref(ptr), ctypes.c_size_t(size))); line = sys._getframe().f_lineno
    caller = sys._getframe(1)
    truth["allocations"].append({
        "size": size, "file": __file__, "line": line, "function": "pinned",
        "caller_line": caller.f_lineno, "caller": caller.f_code.co_qualname,
    })
    return ptr.value


def pinned_by_driver(size):
    ptr = ctypes.c_void_p()
    check(driver.cuMemHostAlloc(ctypes.byref(ptr), ctypes.c_size_t(size), 0)); line = sys._getframe().f_lineno
    caller = sys._getframe(1)
    truth["allocations"].append({
        "size": size, "file": __file__, "line": line, "function": "pinned_by_driver",
        "caller_line": caller.f_lineno, "caller": caller.f_code.co_qualname,
    })
    return ptr.value


class Loader:
    def staging(self, size):
        return pinned(size)

    def pool(self, size):
        return pinned_by_driver(size)


def copy(dst, src, size, direction):
    check(cudart.cudaMemcpy(ctypes.c_void_p(dst), ctypes.c_void_p(src), ctypes.c_size_t(size),
                            direction))
    name = "h2d" if direction == H2D else "d2h"
    truth[name] += 1
    truth[name + "_bytes"] += size


def main():
    device = ctypes.c_void_p()
    check(cudart.cudaMalloc(ctypes.byref(device), ctypes.c_size_t(1 << 20)))
    if len(sys.argv) > 2:
        print("READY", flush=True)
        deadline = time.monotonic() + 60
        while not os.path.exists(sys.argv[2]):
            if time.monotonic() > deadline:
                raise SystemExit("the gate did not open within 60 s")
            time.sleep(0.01)
    batch = Loader().staging(1 << 20)
    result = pinned(256 << 10)
    pool = Loader().pool(512 << 10)
    for _ in range(3):
        copy(device.value, batch, 1 << 20, H2D)
        copy(result, device.value, 256 << 10, D2H)
        copy(device.value, pool, 512 << 10, H2D)
    check(driver.cuMemFreeHost(ctypes.c_void_p(pool)))
    check(cudart.cudaFreeHost(ctypes.c_void_p(batch)))
    check(cudart.cudaFreeHost(ctypes.c_void_p(result)))
    check(cudart.cudaFree(device))
    print(json.dumps(truth), flush=True)
    time.sleep(float(os.environ.get("LINGER_S", "0")))


main()
