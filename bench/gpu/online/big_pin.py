"""Online decisions, the registration measurement: one big pinned request of which a small part
is used. No hotpin code.

The program asks for a 16 GiB pinned buffer with torch.empty(16 GiB, dtype=uint8,
pin_memory=True): PyTorch's caching host allocator makes one cudaHostAlloc of 16 GiB (a power
of two, so not rounded up; .pin_memory() of a pageable tensor would first fill 16 GiB, then
copy it). It fills the first 64 MiB on the CPU, copies that part to the GPU 20 times
(copy_ non_blocking into one device buffer, then a stream synchronise) and checks it. Pinning
16 GiB costs CUDA seconds (every page is faulted in and locked: 8.2 s on the H100, PyTorch
2.11, driver 580); a request served pageable, with only what is copied pinned later, costs
less.

No BY_HAND variant (BY_HAND is accepted and changes nothing; pinned_by_hand_bytes 0).
Prints one JSON line: `alloc_seconds` (the torch.empty(..., pin_memory=True) call alone),
`seconds` (allocation, filling, the copies; the check not counted), its own ground truth,
checks and mismatches. Check (not timed): the part on the GPU in full against the values
computed on the GPU.
Usage: python3 big_pin.py [copies] [GiB] [MiB]   (default 20 copies, 16 GiB, a 64 MiB part;
a part of GiB x 1024 MiB copies the whole buffer each time: the registration of a large
block, off the program's thread or on it)"""
import json
import os
import sys
import time

import torch

copies = int(sys.argv[1]) if len(sys.argv) > 1 else 20
by_hand = os.environ.get("BY_HAND") == "1"  # accepted, changes nothing
BIG = (int(sys.argv[2]) if len(sys.argv) > 2 else 16) << 30
PART = (int(sys.argv[3]) if len(sys.argv) > 3 else 64) << 20
dev = torch.device("cuda")
torch.zeros(1, device=dev)
torch.cuda.synchronize()  # the CUDA context, outside the timed part


def part_values(device):
    return torch.arange(PART, dtype=torch.int32, device=device).remainder_(251).to(torch.uint8)


h2d = h2d_bytes = 0
start = time.perf_counter()
big = torch.empty(BIG, dtype=torch.uint8, pin_memory=True)
alloc_seconds = time.perf_counter() - start
part = big[:PART]
part.copy_(part_values("cpu"))
target = torch.full((PART,), 255, dtype=torch.uint8, device=dev)  # no value of the part
for _ in range(copies):
    target.copy_(part, non_blocking=True)
    torch.cuda.current_stream().synchronize()
    h2d += 1
    h2d_bytes += PART
seconds = time.perf_counter() - start
mismatches = int(not torch.equal(target, part_values(dev)))
print(json.dumps({"program": "big_pin", "copies": copies, "by_hand": by_hand,
                  "alloc_seconds": alloc_seconds, "seconds": seconds,
                  "h2d": h2d, "h2d_bytes": h2d_bytes, "d2h": 0, "d2h_bytes": 0,
                  "checks": 1, "mismatches": mismatches,
                  "pinned_by_hand_bytes": 0, "pinned_requested_bytes": BIG}))
