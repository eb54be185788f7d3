"""Copy speed of 64 MiB host blocks pinned three ways, H2D and D2H, on the GPU machine: pinned by
`pin_memory()` (cudaHostAlloc), a malloc'd block registered in place (cudaHostRegister, as
hotpin pins), and pageable. Median of REPS copies each, after a warm-up; one JSON line each.
Usage: python3 copy_speed.py [MIB] [REPS]"""
import json
import statistics
import sys
import time

import torch

mib = int(sys.argv[1]) if len(sys.argv) > 1 else 64
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
n = mib << 20
dev = torch.empty(n, dtype=torch.uint8, device="cuda")
cudart = torch.cuda.cudart()


def timed(host, h2d):
    times = []
    for _ in range(reps + 2):
        torch.cuda.synchronize()
        t = time.perf_counter()
        if h2d:
            dev.copy_(host)
        else:
            host.copy_(dev)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times[2:])


blocks = {
    "host-alloc": torch.empty(n, dtype=torch.uint8).pin_memory(),
    "pageable": torch.ones(n, dtype=torch.uint8),
}
registered = torch.ones(n, dtype=torch.uint8)
rc = cudart.cudaHostRegister(registered.data_ptr(), n, 0)
blocks["registered"] = registered
for kind, host in blocks.items():
    for h2d in (True, False):
        s = timed(host, h2d)
        print(json.dumps({"kind": kind, "dir": "h2d" if h2d else "d2h", "mib": mib,
                          "ms": round(s * 1e3, 3), "gb_s": round(n / s / 1e9, 1),
                          "register_rc": int(rc)}))
