"""Unmodified PyTorch program 3: activation offloading. Each step's forward pass keeps 8
activations of 32 MiB, offloads each to the CPU as soon as it is made (.to("cpu")), and the
backward pass reloads them (.to("cuda")). No hotpin code. Prints its own ground truth and time."""
import json
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
layers, floats = 8, 8 << 20  # 8 activations of 32 MiB a step
dev = torch.device("cuda")
h2d = d2h = h2d_bytes = d2h_bytes = 0
torch.cuda.synchronize()
start = time.perf_counter()
for step in range(steps):
    x = torch.full((floats,), float(step), device=dev)
    offloaded = []
    for layer in range(layers):
        x = torch.sin(x) + layer
        offloaded.append(x.to("cpu"))  # fresh pageable memory
        d2h += 1
        d2h_bytes += floats * 4
    grad = torch.zeros(floats, device=dev)
    for saved in reversed(offloaded):
        back = saved.to(dev)
        h2d += 1
        h2d_bytes += floats * 4
        grad = grad + torch.cos(back)
    del offloaded
torch.cuda.synchronize()
seconds = time.perf_counter() - start
print(json.dumps({"program": "offload_reload", "steps": steps, "seconds": seconds,
                  "h2d": h2d, "h2d_bytes": h2d_bytes, "d2h": d2h, "d2h_bytes": d2h_bytes}))
