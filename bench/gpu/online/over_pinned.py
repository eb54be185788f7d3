"""Online decisions, PyTorch program 2: an over-pinned program. No hotpin code.

- dataset: 3 GiB of rows (4096 floats each, row i holding the value i) built on the CPU and
  made pinned with .pin_memory() (PyTorch's caching host allocator rounds the request up to
  a power of two: one cudaHostAlloc of 4 GiB), of which only one slice of 64 MiB (4096 rows)
  is ever copied: to the GPU every step (.to("cuda", non_blocking=True)). Before each copy
  the program writes a marker (minus the step, minus 1) into the slice's first and last row;
- staging: 8 pinned buffers of 32 MiB (torch.empty(..., pin_memory=True)): buffer 0 is
  copied to the GPU every step (a marker written into its first 1024 elements first), buffer
  1 receives a 32 MiB result every step (copy_(y, non_blocking=True), then the stream is
  synchronised); buffers 2-4 are copied to the GPU once, at the start; 5-7 are filled on the
  CPU and never copied.

BY_HAND=1 is the version a user pins by hand, pinning only what is copied often: the dataset
stays pageable and only the slice that is copied is pinned (dataset[slice].pin_memory(), once;
the program then reads, marks and copies that pinned tensor), and only staging buffers 0 and
1 are pinned (2-7 pageable). pinned_by_hand_bytes: 64 MiB + 2 x 32 MiB (0 without BY_HAND).
`pinned_requested_bytes` is what the program asks pinned (3 GiB + 8 x 32 MiB as written,
before PyTorch's rounding; the by-hand bytes with BY_HAND).

Prints one JSON line: its own ground truth (copies and bytes per direction), `seconds` (from
the dataset's allocation to the end of the loop: building and pinning the dataset, the
staging buffers, the steps; checks not counted), `loop_seconds` (the steps alone), checks and
mismatches. Checks (every 8th step and the last; not timed): the slice on the GPU in full
against the values computed on the GPU (markers included), staging buffer 0 on the GPU
likewise, the result in buffer 1 in full against the same arithmetic done on the CPU (exact:
integers below 2**24); at the end the once-copied buffers on the GPU.
Usage: python3 over_pinned.py [steps]   (default 150)"""
import json
import os
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 150
by_hand = os.environ.get("BY_HAND") == "1"
COLS = 4096  # 16 KiB rows
ROWS = (3 << 30) // (COLS * 4)  # 3 GiB: 196608 rows
SLICE_ROWS = 4096  # 64 MiB
FIRST = 100_000  # the slice copied: rows FIRST .. FIRST + SLICE_ROWS
STAGES, STAGE_FLOATS = 8, 8 << 20  # 8 x 32 MiB
SLICE_FLOATS = SLICE_ROWS * COLS
MARK = 1024
dev = torch.device("cuda")
torch.zeros(1, device=dev)
torch.cuda.synchronize()  # the CUDA context, outside the timed part

h2d = d2h = h2d_bytes = d2h_bytes = 0
checks = mismatches = 0
check_seconds = 0.0
start = time.perf_counter()
data = torch.arange(ROWS, dtype=torch.float32).unsqueeze(1).expand(ROWS, COLS).contiguous()
if by_hand:
    src = data[FIRST:FIRST + SLICE_ROWS].pin_memory()
else:
    data = data.pin_memory()  # the whole 3 GiB
    src = data[FIRST:FIRST + SLICE_ROWS]
staging = [torch.empty(STAGE_FLOATS, pin_memory=(not by_hand or i < 2)) for i in range(STAGES)]
staging[0].copy_(torch.arange(STAGE_FLOATS, dtype=torch.int32).remainder_(4099))
for i in range(2, STAGES):
    staging[i].fill_(float(i))
weights = []
for i in (2, 3, 4):
    weights.append(staging[i].to(dev))  # used once
    h2d += 1
    h2d_bytes += STAGE_FLOATS * 4
w = weights[0] + weights[1] + weights[2]  # 9 everywhere
torch.cuda.synchronize()
loop_start = time.perf_counter()
for step in range(steps):
    src[0] = -step - 1
    src[-1] = -step - 1
    staging[0][:MARK] = step
    x = src.to(dev, non_blocking=True)
    s = staging[0].to(dev, non_blocking=True)
    h2d += 2
    h2d_bytes += (SLICE_FLOATS + STAGE_FLOATS) * 4
    y = x.view(-1)[:STAGE_FLOATS] + s * 2 + w + step
    staging[1].copy_(y, non_blocking=True)
    torch.cuda.current_stream().synchronize()
    d2h += 1
    d2h_bytes += STAGE_FLOATS * 4
    if step % 8 == 0 or step == steps - 1:
        began = time.perf_counter()
        rows = torch.arange(FIRST, FIRST + SLICE_ROWS, dtype=torch.float32, device=dev)
        expected = rows.unsqueeze(1).expand(SLICE_ROWS, COLS).contiguous()
        expected[0] = -step - 1
        expected[-1] = -step - 1
        checks += 1
        mismatches += int(not torch.equal(x, expected))
        expected = torch.arange(STAGE_FLOATS, dtype=torch.int32, device=dev)
        expected = expected.remainder_(4099).float()
        expected[:MARK] = step
        checks += 1
        mismatches += int(not torch.equal(s, expected))
        expected = src.view(-1)[:STAGE_FLOATS] + staging[0] * 2 + 9 + step
        checks += 1
        mismatches += int(not torch.equal(staging[1], expected))
        check_seconds += time.perf_counter() - began
torch.cuda.synchronize()
end = time.perf_counter()
seconds = end - start - check_seconds
loop_seconds = end - loop_start - check_seconds
for i, wt in zip((2, 3, 4), weights):
    checks += 1
    mismatches += int(not bool((wt == float(i)).all()))
hand = (SLICE_FLOATS + 2 * STAGE_FLOATS) * 4
print(json.dumps({"program": "over_pinned", "steps": steps, "by_hand": by_hand,
                  "seconds": seconds, "loop_seconds": loop_seconds,
                  "h2d": h2d, "h2d_bytes": h2d_bytes, "d2h": d2h, "d2h_bytes": d2h_bytes,
                  "checks": checks, "mismatches": mismatches,
                  "pinned_by_hand_bytes": hand if by_hand else 0,
                  "pinned_requested_bytes": hand if by_hand
                  else ROWS * COLS * 4 + STAGES * STAGE_FLOATS * 4}))
