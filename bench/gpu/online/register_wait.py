"""Online decisions, the registration a program waits for: a 16 GiB pinned request copied
whole, and the program's own small copies timed meanwhile. No hotpin code.

The program asks for GIB GiB pinned (torch.empty(..., pin_memory=True): one cudaHostAlloc),
fills it, and copies it whole to the GPU COPIES times (copy_ non_blocking, then a stream
synchronise). After each big copy it spends WINDOW seconds on small round trips (64 KiB to
the GPU and back, each checked), as a training loop's metrics and batches keep calling CUDA,
and times each one. hotpin serves the request pageable and, once its copies repay it,
registers it (on its pinner thread, in chunks): a registration holds CUDA's lock, so the
longest small round trip is the longest the program's thread waited for it.

With BIG_PAGEABLE=1 (environment) the big tensor is pageable (torch.empty without
pin_memory): hotpin then pins it hidden from the program, once its copies repay it.

With HOT_MIB > 0, a last phase follows: a fresh pageable tensor of HOT_MIB MiB is copied to
the GPU again and again for 3 WINDOWs, each copy followed by 8 small round trips, and every
call is timed. Under a budget that holds the big block alone (`--budget GIB G`), this hot
tensor is denser and displaces the big block, whose registration is then undone: the longest
hot copy and the longest round trip of this phase are the longest the program waited for it.

With BUSY_MIB=N (environment), another thread keeps copying a pageable tensor of N MiB to the
GPU on its own stream throughout (`busy_copies` in the output; BUSY_TIGHT=1: a malloc'd buffer
copied back to back through the driver instead): while a program's large
copies are inside CUDA, a registration call takes far longer and holds every other call.

Prints one JSON line: `seconds` (everything but the check), `longest_round_trip_ms` (over all
windows) and per window; with HOT_MIB, `hot_copies`, `longest_hot_copy_ms`,
`median_hot_copy_ms` and `longest_evict_round_trip_ms`; its own ground truth, checks and
mismatches. Check: the GPU's copy against the buffer, on every 4096th byte and on the first
64 MiB in full, every small round trip, and each hot copy's first and last 64 KiB.
Usage: python3 register_wait.py [GIB] [COPIES] [WINDOW] [HOT_MIB]   (16, 4, 1.5, 0)"""
import ctypes
import json
import os
import sys
import threading
import time

import torch

GIB = int(sys.argv[1]) if len(sys.argv) > 1 else 16
COPIES = int(sys.argv[2]) if len(sys.argv) > 2 else 4
WINDOW = float(sys.argv[3]) if len(sys.argv) > 3 else 1.5
HOT_MIB = int(sys.argv[4]) if len(sys.argv) > 4 else 0
BIG = GIB << 30
HEAD = 64 << 20
dev = torch.device("cuda")
torch.zeros(1, device=dev)
torch.cuda.synchronize()

small = torch.arange(16384, dtype=torch.int32)  # 64 KiB, pageable
small_dev = torch.empty_like(small, device=dev)
h2d = h2d_bytes = d2h = d2h_bytes = checks = mismatches = 0
start = time.perf_counter()
PAGEABLE = os.environ.get("BIG_PAGEABLE") == "1"
big = torch.empty(BIG, dtype=torch.uint8, pin_memory=not PAGEABLE)
alloc_seconds = time.perf_counter() - start
big.fill_(7)
big[::4096] = torch.arange(BIG // 4096, dtype=torch.int64).remainder_(251).to(torch.uint8)
big[:HEAD] = torch.arange(HEAD, dtype=torch.int32).remainder_(253).to(torch.uint8)
target = torch.empty(BIG, dtype=torch.uint8, device=dev)

BUSY_MIB = int(os.environ.get("BUSY_MIB", "0"))
busy_counts = {"copies": 0, "bytes": 0, "checks": 0, "mismatches": 0}
busy_stop = threading.Event()


BUSY_TIGHT = os.environ.get("BUSY_TIGHT") == "1"
if BUSY_TIGHT:
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libcuda = ctypes.CDLL("libcuda.so.1")
    libcuda.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
    libcuda.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
    libcuda.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
    busy_context = ctypes.c_void_p()
    libcuda.cuCtxGetCurrent(ctypes.byref(busy_context))


def busy_tight():
    """BUSY_TIGHT=1: the other thread's copies made back to back through the driver
    (cuMemcpyHtoD of a malloc'd buffer, then 4 KiB back to check), as register_stall.py's
    busy thread makes them: no Python work between copies but the loop's."""
    size = BUSY_MIB << 20
    src = libc.malloc(size)
    ctypes.memset(src, 3, size)
    dst = torch.empty(size, dtype=torch.uint8, device=dev)
    edge = (ctypes.c_ubyte * 4096)()
    libcuda.cuCtxSetCurrent(busy_context)
    while not busy_stop.is_set():
        rc = libcuda.cuMemcpyHtoD_v2(dst.data_ptr(), src, size)
        rc = rc or libcuda.cuMemcpyDtoH_v2(edge, dst.data_ptr() + size - 4096, 4096)
        busy_counts["copies"] += 1
        busy_counts["bytes"] += size
        busy_counts["checks"] += 1
        busy_counts["mismatches"] += int(rc != 0 or edge[0] != 3 or edge[4095] != 3)


def busy():
    """Another thread's large copies: a pageable tensor of BUSY_MIB MiB copied to the GPU on
    a stream of its own, again and again, until the program's end; every 16th checked."""
    if BUSY_TIGHT:
        return busy_tight()
    src = torch.empty(BUSY_MIB << 18, dtype=torch.int32)
    src.fill_(3)
    dst = torch.empty_like(src, device=dev)
    stream = torch.cuda.Stream()
    n = 0
    with torch.cuda.stream(stream):
        while not busy_stop.is_set():
            src[0] = n
            dst.copy_(src)  # synchronous: from pageable memory
            stream.synchronize()
            busy_counts["copies"] += 1
            busy_counts["bytes"] += src.numel() * 4
            if n % 16 == 0:
                busy_counts["checks"] += 1
                busy_counts["mismatches"] += int(dst[0].item() != n or dst[-1].item() != 3)
            n += 1


busy_thread = threading.Thread(target=busy, daemon=True) if BUSY_MIB else None
if busy_thread:
    busy_thread.start()


def round_trip():
    """One small round trip, checked; its seconds."""
    global h2d, h2d_bytes, d2h, d2h_bytes, checks, mismatches
    began = time.perf_counter()
    small_dev.copy_(small)
    back = small_dev.cpu()
    took = time.perf_counter() - began
    h2d += 1
    d2h += 1
    h2d_bytes += small.numel() * 4
    d2h_bytes += small.numel() * 4
    checks += 1
    mismatches += int(not torch.equal(back, small))
    small.add_(1)
    return took


windows = []
for i in range(COPIES):
    target.copy_(big, non_blocking=True)
    torch.cuda.current_stream().synchronize()
    h2d += 1
    h2d_bytes += BIG
    longest = 0.0
    trips = 0
    until = time.perf_counter() + WINDOW
    while time.perf_counter() < until:
        longest = max(longest, round_trip())
        trips += 1
    windows.append({"longest_ms": longest * 1e3, "round_trips": trips})


hot_times, evict_trips = [], []
if HOT_MIB:
    hot = torch.empty(HOT_MIB << 18, dtype=torch.int32)  # pageable
    hot_dev = torch.empty_like(hot, device=dev)
    edge = 16384  # 64 KiB of int32
    until = time.perf_counter() + 3 * WINDOW
    n = 0
    while time.perf_counter() < until:
        hot[:edge].fill_(n)
        hot[-edge:].fill_(n)
        began = time.perf_counter()
        hot_dev.copy_(hot)  # synchronous: from pageable memory
        hot_times.append(time.perf_counter() - began)
        h2d += 1
        h2d_bytes += hot.numel() * 4
        checks += 1
        mismatches += int(not (torch.equal(hot_dev[:edge].cpu(), hot[:edge])
                               and torch.equal(hot_dev[-edge:].cpu(), hot[-edge:])))
        d2h += 2
        d2h_bytes += 2 * edge * 4
        evict_trips.extend(round_trip() for _ in range(8))
        n += 1
seconds = time.perf_counter() - start
if busy_thread:
    busy_stop.set()
    busy_thread.join()
    h2d += busy_counts["copies"]
    h2d_bytes += busy_counts["bytes"]
    d2h += (1 if BUSY_TIGHT else 2) * busy_counts["checks"]
    d2h_bytes += (4096 if BUSY_TIGHT else 8) * busy_counts["checks"]
    checks += busy_counts["checks"]
    mismatches += busy_counts["mismatches"]
checks += 2
mismatches += int(not torch.equal(target[::4096].cpu(), big[::4096]))
mismatches += int(not torch.equal(target[:HEAD].cpu(), big[:HEAD]))
print(json.dumps({"program": "register_wait", "gib": GIB, "copies": COPIES,
                  "big_pageable": PAGEABLE,
                  "alloc_seconds": alloc_seconds, "seconds": seconds,
                  "longest_round_trip_ms": max(w["longest_ms"] for w in windows),
                  "windows": windows,
                  **({"hot_mib": HOT_MIB, "hot_copies": len(hot_times),
                      "longest_hot_copy_ms": max(hot_times) * 1e3,
                      "median_hot_copy_ms": sorted(hot_times)[len(hot_times) // 2] * 1e3,
                      "longest_evict_round_trip_ms": max(evict_trips) * 1e3}
                     if hot_times else {}),
                  "h2d": h2d, "h2d_bytes": h2d_bytes, "d2h": d2h,
                  "d2h_bytes": d2h_bytes, "checks": checks, "mismatches": mismatches,
                  "busy_mib": BUSY_MIB, "busy_copies": busy_counts["copies"],
                  "pinned_by_hand_bytes": 0, "pinned_requested_bytes": 0 if PAGEABLE else BIG}))
