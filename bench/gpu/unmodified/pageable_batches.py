"""Unmodified PyTorch program 1: a training-style loop that builds a fresh pageable batch on
the CPU every step, moves it to the GPU with .cuda(), and brings a result back with .cpu().
No hotpin code. Prints its own ground truth (copies and bytes per direction), its time and
the checks of what it computed (every 8th step and the last: the batch on the GPU, and 2048
samples of the result brought back against the GPU's own; their time is not counted)."""
import json
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
batch_floats = 16 << 20  # 64 MiB batches
out_floats = 8 << 20  # 32 MiB results
dev = torch.device("cuda")
weight = torch.randn(1024, 1024, device=dev)
h2d = d2h = h2d_bytes = d2h_bytes = 0
checks = mismatches = 0
check_seconds = 0.0
torch.cuda.synchronize()
start = time.perf_counter()
for step in range(steps):
    batch = torch.empty(batch_floats).fill_(step)  # fresh pageable memory each step
    x = batch.cuda()
    h2d += 1
    h2d_bytes += batch.numel() * 4
    y = (x[: 1024 * 1024].view(1024, 1024) @ weight).flatten().repeat(8)
    result = y.cpu()  # fresh pageable memory each step
    d2h += 1
    d2h_bytes += result.numel() * 4
    if step % 8 == 0 or step == steps - 1:
        began = time.perf_counter()
        samples = y[::4096].cpu()
        d2h += 1
        d2h_bytes += samples.numel() * 4
        checks += 2
        mismatches += int(not bool((x == step).all()))
        mismatches += int(not torch.equal(result[::4096], samples))
        check_seconds += time.perf_counter() - began
torch.cuda.synchronize()
seconds = time.perf_counter() - start - check_seconds
print(json.dumps({"program": "pageable_batches", "steps": steps, "seconds": seconds,
                  "h2d": h2d, "h2d_bytes": h2d_bytes, "d2h": d2h, "d2h_bytes": d2h_bytes,
                  "checks": checks, "mismatches": mismatches}))
