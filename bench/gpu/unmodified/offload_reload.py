"""Unmodified PyTorch program 3: activation offloading. Each step's forward pass keeps 8
activations of 32 MiB, offloads each to the CPU as soon as it is made (.to("cpu")), and the
backward pass reloads them (.to("cuda")). No hotpin code. Prints its own ground truth, its time
and the checks of what it computed (every 4th step and the last: each offloaded activation,
2048 samples against the GPU's own, and each reloaded one in full against it on the GPU; their
time is not counted)."""
import json
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
layers, floats = 8, 8 << 20  # 8 activations of 32 MiB a step
dev = torch.device("cuda")
h2d = d2h = h2d_bytes = d2h_bytes = 0
checks = mismatches = 0
check_seconds = 0.0
torch.cuda.synchronize()
start = time.perf_counter()
for step in range(steps):
    checked = step % 4 == 0 or step == steps - 1
    x = torch.full((floats,), float(step), device=dev)
    offloaded, kept = [], []
    for layer in range(layers):
        x = torch.sin(x) + layer
        offloaded.append(x.to("cpu"))  # fresh pageable memory
        d2h += 1
        d2h_bytes += floats * 4
        if checked:
            kept.append(x)
    grad = torch.zeros(floats, device=dev)
    for i, saved in reversed(list(enumerate(offloaded))):
        back = saved.to(dev)
        h2d += 1
        h2d_bytes += floats * 4
        grad = grad + torch.cos(back)
        if checked:
            began = time.perf_counter()
            samples = kept[i][::4096].cpu()
            d2h += 1
            d2h_bytes += samples.numel() * 4
            checks += 2
            mismatches += int(not torch.equal(saved[::4096], samples))
            mismatches += int(not torch.equal(back, kept[i]))
            check_seconds += time.perf_counter() - began
    del offloaded, kept
torch.cuda.synchronize()
seconds = time.perf_counter() - start - check_seconds
print(json.dumps({"program": "offload_reload", "steps": steps, "seconds": seconds,
                  "h2d": h2d, "h2d_bytes": h2d_bytes, "d2h": d2h, "d2h_bytes": d2h_bytes,
                  "checks": checks, "mismatches": mismatches}))
