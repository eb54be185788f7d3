#!/usr/bin/env python3
"""DataLoader's shape without PyTorch (#40 item 1): 2 forked workers each build 16 MiB batches in fresh
malloc'd memory, collate them into shared memory, and hand them to the main process, which
copies each to the device (CUDA stand-in through ctypes) and lets it go. Prints main's wall
seconds and the workers' CPU seconds.
Usage: LD_LIBRARY_PATH=target/vm/standin python3 loader_shape.py target/vm/standin/libcudart.so.13 [BATCHES]"""
import ctypes, json, multiprocessing as mp, os, resource, sys, time
from multiprocessing import resource_tracker, shared_memory

BATCH = 16 << 20
N = int(sys.argv[2]) if len(sys.argv) > 2 else 120
cudart = ctypes.CDLL(sys.argv[1])


def worker(q, start, step):
    for i in range(start, N, step):
        rows = [bytearray(BATCH // 64) for _ in range(64)]   # __getitem__: fresh rows
        for r in rows:
            r[0] = i & 0xff
        shm = shared_memory.SharedMemory(create=True, size=BATCH)
        resource_tracker.unregister(shm._name, "shared_memory")  # main unlinks it
        off = 0
        for r in rows:                                       # collate into shared memory
            shm.buf[off:off + len(r)] = r
            off += len(r)
        q.put((i, shm.name))
        shm.close()


def main():
    dev = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(BATCH)) == 0
    mp.set_start_method("fork")
    began = time.perf_counter()
    q = mp.Queue(maxsize=4)
    ps = [mp.Process(target=worker, args=(q, k, 2)) for k in range(2)]
    for p in ps:
        p.start()
    wrong = 0
    for _ in range(N):
        i, name = q.get()
        shm = shared_memory.SharedMemory(name=name)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(shm.buf))
        assert cudart.cudaMemcpy(dev, ctypes.c_void_p(addr), ctypes.c_size_t(BATCH), 1) == 0
        wrong += shm.buf[0] != (i & 0xff)
        shm.close(); shm.unlink()
    for p in ps:
        p.join()
    seconds = time.perf_counter() - began
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"seconds": seconds, "children_cpu": ru.ru_utime + ru.ru_stime,
                      "mismatches": wrong}))


main()
