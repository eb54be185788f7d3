"""Merging runs (#29), the PyTorch program: 6 pageable CPU tensors of 32 MiB; a `train` run
copies tensors 0-3 to the GPU every step, an `eval` run (the odd one out between training
runs) copies tensors 4 and 5. No hotpin code.

Each step writes the step number into the first and last 1024 elements of every tensor it
copies, copies each to the GPU (.to("cuda", non_blocking=True)), and checks every 4th step
the copies in full against values computed on the GPU (markers included), untimed.
Prints one JSON line: its ground truth, `seconds` (allocation, filling and the steps; checks
not counted), checks and mismatches.
Usage: python3 varying.py train|eval [steps]   (default 100 steps)"""
import json
import sys
import time

import torch

mode = sys.argv[1] if len(sys.argv) > 1 else "train"
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 100
FLOATS = 8 << 20  # 32 MiB
MARK = 1024
hot_ids = [0, 1, 2, 3] if mode == "train" else [4, 5]
dev = torch.device("cuda")
torch.zeros(1, device=dev)
torch.cuda.synchronize()


def pattern_into(t, salt):
    t.copy_(torch.arange(t.numel(), dtype=torch.int32).remainder_(4099).add_(16 * salt))
    return t


def pattern_gpu(salt):
    return torch.arange(FLOATS, dtype=torch.int32, device=dev).remainder_(4099).add_(16 * salt).float()


h2d = h2d_bytes = checks = mismatches = 0
check_seconds = 0.0
start = time.perf_counter()
tensors = [pattern_into(torch.empty(FLOATS), i) for i in range(6)]
for step in range(steps):
    on_gpu = []
    for i in hot_ids:
        tensors[i][:MARK] = step
        tensors[i][-MARK:] = step
        on_gpu.append(tensors[i].to(dev, non_blocking=True))
    h2d += len(hot_ids)
    h2d_bytes += len(hot_ids) * FLOATS * 4
    torch.cuda.synchronize()
    if step % 4 == 0 or step == steps - 1:
        t0 = time.perf_counter()
        for i, x in zip(hot_ids, on_gpu):
            expected = pattern_gpu(i)
            expected[:MARK] = step
            expected[-MARK:] = step
            checks += 1
            mismatches += int(not torch.equal(x, expected))
        check_seconds += time.perf_counter() - t0
seconds = time.perf_counter() - start - check_seconds
print(json.dumps({"program": "varying", "mode": mode, "steps": steps, "seconds": seconds,
                  "h2d": h2d, "h2d_bytes": h2d_bytes, "d2h": 0, "d2h_bytes": 0,
                  "checks": checks, "mismatches": mismatches}))
