"""Does one large host registration stall the program's other CUDA calls? No hotpin code.

A registering thread registers (cuMemHostRegister) GIB GiB of touched host memory, in one
call or in chunks of CHUNK MiB (page-aligned), then unregisters it the same way. Meanwhile a
copying thread, with no registration of its own, copies 64 KiB to the GPU and back in a
loop (cuMemcpyHtoD, cuMemcpyDtoH: small synchronous copies, as a training loop's metrics
are), and times every copy. If the driver holds a lock for the whole of a registration call,
the copying thread waits for the call: its longest copy is then about the longest
registration call, and chunks shorten it.

With BUSY_MIB=N (environment), a third thread keeps copying N MiB to the GPU throughout
(cuMemcpyHtoD from host memory of its own: registered with BUSY_PINNED=1, else pageable), as
a program whose large copies go on while hotpin registers and unregisters elsewhere; its
copies are checked too. With SYNC_FIRST=1 the registering thread synchronises the context
before each chunk's call.

Usage: python3 register_stall.py GIB CONFIG [CONFIG ...], each CONFIG `CHUNK_MIB[:PAUSE_US]`
(CHUNK 0: one call; PAUSE: a sleep after each chunk's call, so that a thread waiting for the
driver gets in between chunks).
A copy is counted in the phase in which it ends: one that waited through a whole call ends
after it.
Prints one JSON line per configuration, interleaved, ROUNDS (env, default 3) rounds; each
line checks the bytes copied back (`mismatches`)."""
import ctypes
import json
import mmap
import os
import sys
import threading
import time

GIB = int(sys.argv[1])
CONFIGS = [(int(c.split(":")[0]), int(c.split(":")[1]) if ":" in c else 0)
           for c in sys.argv[2:]] or [(0, 0), (1024, 0)]
ROUNDS = int(os.environ.get("ROUNDS", "3"))
SMALL = 64 << 10
PAGE = mmap.PAGESIZE

cuda = ctypes.CDLL("libcuda.so.1")
BUSY_MIB = int(os.environ.get("BUSY_MIB", "0"))
BUSY_PINNED = os.environ.get("BUSY_PINNED") == "1"
SYNC_FIRST = os.environ.get("SYNC_FIRST") == "1"
for name in ["cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent",
             "cuCtxSynchronize",
             "cuMemAlloc_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemHostRegister_v2",
             "cuMemHostUnregister"]:
    getattr(cuda, name).restype = ctypes.c_int
cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
cuda.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
cuda.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
cuda.cuMemHostRegister_v2.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
cuda.cuMemHostUnregister.argtypes = [ctypes.c_void_p]


def check(rc, what):
    if rc != 0:
        raise SystemExit(f"{what}: CUDA error {rc}")


check(cuda.cuInit(0), "cuInit")
device = ctypes.c_int()
check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
context = ctypes.c_void_p()
check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")

size = GIB << 30
big = mmap.mmap(-1, size)
base = ctypes.addressof(ctypes.c_char.from_buffer(big))
step = 256 << 20
for offset in range(0, size, step):  # touched, as a program's own data is
    ctypes.memset(base + offset, 1, min(step, size - offset))

device_buf = ctypes.c_uint64()
check(cuda.cuMemAlloc_v2(ctypes.byref(device_buf), SMALL), "cuMemAlloc")
send = (ctypes.c_ubyte * SMALL)(*([7] * SMALL))
back = (ctypes.c_ubyte * SMALL)()
if BUSY_MIB:
    busy_size = BUSY_MIB << 20
    busy_host = mmap.mmap(-1, busy_size)
    busy_base = ctypes.addressof(ctypes.c_char.from_buffer(busy_host))
    ctypes.memset(busy_base, 3, busy_size)
    if BUSY_PINNED:
        check(cuda.cuMemHostRegister_v2(busy_base, busy_size, 0), "register the busy buffer")
    busy_dev = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(busy_dev), busy_size), "cuMemAlloc")
    busy_edge = (ctypes.c_ubyte * 4096)()


def chunks(chunk_mib):
    if chunk_mib == 0:
        return [(base, size)]
    chunk = (chunk_mib << 20) // PAGE * PAGE
    return [(base + at, min(chunk, size - at)) for at in range(0, size, chunk)]


def one(chunk_mib, pause_us):
    stop = threading.Event()
    timed = []  # (began, ended) of each round trip
    mismatches = [0]

    def copier():
        check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
        n = 0
        while not stop.is_set():
            send[0] = n % 251
            began = time.perf_counter()
            check(cuda.cuMemcpyHtoD_v2(device_buf.value, send, SMALL), "cuMemcpyHtoD")
            check(cuda.cuMemcpyDtoH_v2(back, device_buf.value, SMALL), "cuMemcpyDtoH")
            timed.append((began, time.perf_counter()))
            if back[0] != n % 251 or back[SMALL - 1] != 7:
                mismatches[0] += 1
            n += 1

    def each(call, pieces):
        took = []
        began = time.perf_counter()
        for start, length in pieces:
            if SYNC_FIRST:
                check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
            t = time.perf_counter()
            call(start, length)
            took.append(time.perf_counter() - t)
            if pause_us:
                time.sleep(pause_us / 1e6)
        return began, time.perf_counter(), took

    busy_copies = [0]

    def loader():
        check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
        while not stop.is_set():
            check(cuda.cuMemcpyHtoD_v2(busy_dev.value, busy_base, busy_size), "busy copy")
            check(cuda.cuMemcpyDtoH_v2(busy_edge, busy_dev.value + busy_size - 4096, 4096),
                  "busy check")
            if busy_edge[0] != 3 or busy_edge[4095] != 3:
                mismatches[0] += 1
            busy_copies[0] += 1

    thread = threading.Thread(target=copier)
    thread.start()
    busy = threading.Thread(target=loader) if BUSY_MIB else None
    if busy:
        busy.start()
    time.sleep(0.3)
    pieces = chunks(chunk_mib)
    r0, r1, calls = each(lambda s, n: check(cuda.cuMemHostRegister_v2(s, n, 0), "register"), pieces)
    u0, u1, uncalls = each(lambda s, n: check(cuda.cuMemHostUnregister(s), "unregister"), pieces)
    time.sleep(0.1)
    stop.set()
    thread.join()
    if busy:
        busy.join()

    def longest(w0, w1):  # the longest round trip that overlapped [w0, w1]
        return max([e - b for b, e in timed if b < w1 and e > w0] or [0.0]) * 1e3

    idle = [e - b for b, e in timed if e < r0 - 0.05]
    return {"gib": GIB, "chunk_mib": chunk_mib, "pause_us": pause_us, "calls": len(calls),
            "register_s": r1 - r0, "longest_register_call_ms": max(calls) * 1e3,
            "unregister_s": u1 - u0, "longest_unregister_call_ms": max(uncalls) * 1e3,
            "copy_median_idle_ms": sorted(idle)[len(idle) // 2] * 1e3 if idle else None,
            "copy_longest_during_register_ms": longest(r0, r1),
            "copy_longest_during_unregister_ms": longest(u0, u1),
            "copies_during_register": sum(1 for b, e in timed if b >= r0 and e <= r1),
            "busy_mib": BUSY_MIB, "busy_pinned": BUSY_PINNED, "sync_first": SYNC_FIRST,
            "busy_copies": busy_copies[0],
            "checks": len(timed) + busy_copies[0], "mismatches": mismatches[0]}


for r in range(ROUNDS):
    for chunk_mib, pause_us in CONFIGS:
        line = one(chunk_mib, pause_us)
        line["round"] = r + 1
        print(json.dumps(line), flush=True)
