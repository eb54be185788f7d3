"""What the tracer adds to a Python program's allocations, on the CUDA stand-in (a test fixture,
not CUDA): N pinned blocks of 64 KiB made with the runtime's cudaMallocHost through ctypes,
from a function two Python frames deep, each written and read back, then freed; timed by the
program itself. Under the tracer (its parent, `tracer record -- ...`) it also sums the run time
of the tracer's kernel programs over the loop (their fdinfo's run_time_ns, with
kernel.bpf_stats_enabled=1). The stand-in's version of bench/gpu/python/alloc_cost.py, which
needs PyTorch. Prints {"n", "us_per_alloc", "bpf_ns_per_alloc", "mismatches"}.
Usage: python3 alloc_cost.py N LIBCUDART"""
import ctypes
import json
import os
import sys
import time

N = int(sys.argv[1])
SIZE = 64 << 10
cudart = ctypes.CDLL(sys.argv[2])
time.sleep(1.5)  # the tracer's rescan, for a recording started before the interpreter


def make(i):
    ptr = ctypes.c_void_p()
    assert cudart.cudaMallocHost(ctypes.byref(ptr), ctypes.c_size_t(SIZE)) == 0
    block = (ctypes.c_ubyte * SIZE).from_address(ptr.value)
    block[0], block[-1] = i & 0xff, (i >> 8) & 0xff
    return ptr, block


def step(i):
    ptr, block = make(i)
    wrong = block[0] != i & 0xff or block[-1] != (i >> 8) & 0xff
    assert cudart.cudaFreeHost(ptr) == 0
    return int(wrong)


def bpf_run_time_ns():
    """The run time of every BPF program the parent process holds, summed."""
    total, fds = 0, f"/proc/{os.getppid()}/fdinfo"
    for fd in os.listdir(fds):
        try:
            for line in open(os.path.join(fds, fd)):
                if line.startswith("run_time_ns:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


mismatches = sum(step(i) for i in range(50))
bpf_before = bpf_run_time_ns()
start = time.perf_counter()
for i in range(N):
    mismatches += step(i)
elapsed = time.perf_counter() - start
bpf = bpf_run_time_ns() - bpf_before
print(json.dumps({"n": N, "us_per_alloc": elapsed / N * 1e6, "bpf_ns_per_alloc": bpf / N,
                  "mismatches": mismatches}))
