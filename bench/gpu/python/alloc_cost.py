"""What reading Python lines adds to an allocation the tracer sees (#28): in a PyTorch process
(CUDA set up first, so the tracer finds the interpreter when the CUDA runtime loads), N
pinned blocks of 64 KiB are made with the runtime's cudaMallocHost (through ctypes, from a
function two Python frames deep) and freed, timed by the program itself. Each block is
written and read back. Under the tracer (its parent, `tracer record -- ...`) it also sums
the run time of the tracer's kernel programs over the loop (their fdinfo's run_time_ns, with
kernel.bpf_stats_enabled=1): the time the probes took, apart from the CUDA calls' own time,
which varies far more. Prints {"n", "us_per_alloc", "bpf_ns_per_alloc", "mismatches"}.
With LIBCUDART, the runtime is that library and PyTorch is not used (the CUDA stand-in's,
a test fixture, not CUDA: bench/standin/tracer_alloc_cost.sh).
Usage: python3 alloc_cost.py [N [LIBCUDART]]"""
import os
import ctypes
import json
import sys
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
SIZE = 64 << 10
if len(sys.argv) > 2:
    runtime = sys.argv[2]
else:
    import torch

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    runtime = next(line.split()[-1] for line in open("/proc/self/maps")
                   if "libcudart.so" in line)
cudart = ctypes.CDLL(runtime)
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
