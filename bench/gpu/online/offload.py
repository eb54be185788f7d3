"""Online decisions, PyTorch program 4: activation offloading. No hotpin code.

Each step's forward pass makes 8 activations of 32 MiB on the GPU and offloads each to the
CPU as soon as it is made, into a fresh CPU tensor; the backward pass reloads them, last
first, with .to("cuda", non_blocking=True). The even layers offload with
.to("cpu", non_blocking=True), the odd ones with .to("cpu"):

- PyTorch gives the destination of a non-blocking device-to-host .to() pinned memory of its
  own (aten's _to_copy asks for a pinned output, from the caching host allocator: a
  cudaHostAlloc per new block, blocks reused once their copies are done), so the even layers
  exercise pinned requests made fresh every step;
- the odd layers' destinations are fresh pageable memory (malloc) every step.

BY_HAND=1 is the version a user pins by hand: 8 pinned buffers of 32 MiB allocated once and
reused every step (buffer.copy_(activation, non_blocking=True)), reloaded from there.
pinned_by_hand_bytes: 8 x 32 MiB (0 without BY_HAND).

Prints one JSON line: its own ground truth (copies and bytes per direction), `seconds` (the
steps; checks not counted; with BY_HAND the buffers' allocation included), checks and
mismatches. Checks (every 4th step and the last; not timed): each reloaded activation in full
against the GPU original, on the GPU.
Usage: python3 offload.py [steps]   (default 30)"""
import json
import os
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
by_hand = os.environ.get("BY_HAND") == "1"
LAYERS, FLOATS = 8, 8 << 20  # 8 activations of 32 MiB a step
dev = torch.device("cuda")
torch.zeros(1, device=dev)
torch.cuda.synchronize()  # the CUDA context, outside the timed part
h2d = d2h = h2d_bytes = d2h_bytes = 0
checks = mismatches = 0
check_seconds = 0.0
start = time.perf_counter()
buffers = [torch.empty(FLOATS, pin_memory=True) for _ in range(LAYERS)] if by_hand else None
for step in range(steps):
    checked = step % 4 == 0 or step == steps - 1
    x = torch.full((FLOATS,), float(step), device=dev)
    offloaded, kept = [], []
    for layer in range(LAYERS):
        x = torch.sin(x) + layer
        if by_hand:
            offloaded.append(buffers[layer].copy_(x, non_blocking=True))
        elif layer % 2 == 0:
            offloaded.append(x.to("cpu", non_blocking=True))  # fresh, pinned by PyTorch
        else:
            offloaded.append(x.to("cpu"))  # fresh pageable memory
        d2h += 1
        d2h_bytes += FLOATS * 4
        if checked:
            kept.append(x)
    grad = torch.zeros(FLOATS, device=dev)
    for i, saved in reversed(list(enumerate(offloaded))):
        back = saved.to(dev, non_blocking=True)
        h2d += 1
        h2d_bytes += FLOATS * 4
        grad = grad + torch.cos(back)
        if checked:
            began = time.perf_counter()
            checks += 1
            mismatches += int(not torch.equal(back, kept[i]))
            check_seconds += time.perf_counter() - began
    del offloaded, kept
torch.cuda.synchronize()
seconds = time.perf_counter() - start - check_seconds
pinned = LAYERS * FLOATS * 4 if by_hand else 0
print(json.dumps({"program": "offload", "steps": steps, "by_hand": by_hand, "seconds": seconds,
                  "loop_seconds": seconds,
                  "h2d": h2d, "h2d_bytes": h2d_bytes, "d2h": d2h, "d2h_bytes": d2h_bytes,
                  "checks": checks, "mismatches": mismatches,
                  "pinned_by_hand_bytes": pinned, "pinned_requested_bytes": pinned}))
