"""Node budget, the PyTorch program: HOT pageable CPU tensors of 64 MiB copied to the GPU every
step, and WORK_MS of GPU work between steps (matrix products), which sets how dense its hot
set is: with no work its copies are the whole step, with much work they are a small part.
No hotpin code.

Each step writes the step number into the first and last 1024 elements of every hot tensor,
copies each to the GPU (.to("cuda", non_blocking=True)), and checks every 4th step the copies
in full against values computed on the GPU (markers included), untimed.

Prints one JSON line: its own ground truth (copies and bytes to the GPU), `seconds` (the
steps, checks not counted), checks and mismatches.
Usage: python3 hot_loop.py STEPS HOT WORK_MS"""
import json
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
HOT = int(sys.argv[2]) if len(sys.argv) > 2 else 4
work_ms = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
FLOATS = 16 << 20  # 64 MiB
MARK = 1024
dev = torch.device("cuda")
a = torch.randn(2048, 2048, device=dev)
torch.cuda.synchronize()
# How many products make WORK_MS on this GPU.
began = time.perf_counter()
for _ in range(20):
    b = a @ a
torch.cuda.synchronize()
per_product = (time.perf_counter() - began) / 20
products = int(round(work_ms / 1000 / per_product)) if work_ms > 0 else 0


def pattern_into(t, salt):
    t.copy_(torch.arange(t.numel(), dtype=torch.int32).remainder_(4099).add_(16 * salt))
    return t


def pattern_gpu(salt):
    return torch.arange(FLOATS, dtype=torch.int32, device=dev).remainder_(4099).add_(16 * salt).float()


hot = [pattern_into(torch.empty(FLOATS), i) for i in range(HOT)]
h2d = h2d_bytes = checks = mismatches = 0
check_seconds = 0.0
start = time.perf_counter()
for step in range(steps):
    for h in hot:
        h[:MARK] = step
        h[-MARK:] = step
    on_gpu = [h.to(dev, non_blocking=True) for h in hot]
    h2d += HOT
    h2d_bytes += HOT * FLOATS * 4
    for _ in range(products):
        b = a @ a
    torch.cuda.synchronize()
    if step % 4 == 0 or step == steps - 1:
        t0 = time.perf_counter()
        for i, x in enumerate(on_gpu):
            expected = pattern_gpu(i)
            expected[:MARK] = step
            expected[-MARK:] = step
            checks += 1
            mismatches += int(not torch.equal(x, expected))
        check_seconds += time.perf_counter() - t0
seconds = time.perf_counter() - start - check_seconds
print(json.dumps({"program": "hot_loop", "steps": steps, "hot": HOT, "work_ms": work_ms,
                  "seconds": seconds, "h2d": h2d, "h2d_bytes": h2d_bytes, "d2h": 0,
                  "d2h_bytes": 0, "checks": checks, "mismatches": mismatches}))
