"""Online decisions, PyTorch program 1: a loop over hot pageable tensors, with cold and idle
memory beside them. No hotpin code.

- hot: 3 CPU tensors of 64 MiB, copied to the GPU every step (one with .cuda(), two with
  .to("cuda", non_blocking=True)); before each copy the program writes the step number into
  the first and last 1024 elements of each (a batch that changes a little every step, so a
  copy that did not happen, or read stale memory, is seen);
- result: a 32 MiB result brought back every step with .cpu(), into a fresh CPU tensor;
- cold: 4 CPU tensors of 64 MiB, copied to the GPU once, at the start;
- large: 1 GiB CPU tensor, filled on the CPU (so its pages are real), never copied.

BY_HAND=1 is the version a user pins by hand: the hot tensors are allocated pinned
(torch.empty(..., pin_memory=True)) and every copy of them is non_blocking, the result is
copied into one pinned 32 MiB buffer reused every step (out.copy_(y, non_blocking=True), then
the stream is synchronised); cold and large stay pageable. pinned_by_hand_bytes: 3 x 64 MiB +
32 MiB (0 without BY_HAND).

Prints one JSON line: its own ground truth (copies and bytes per direction), `seconds` (from
the first host allocation to the end of the loop: allocation, filling, the cold copies and
the steps; checks not counted), `loop_seconds` (the steps alone), the checks and mismatches.
Checks (every 4th step and the last; not timed): each hot tensor on the GPU in full against
the values computed on the GPU (markers included), the result brought back in full against
the same arithmetic done by the CPU on the CPU tensors (exact: small integers, scaled by
powers of two); at the end each cold tensor on the GPU in full against the GPU's own values,
and the large tensor (1 in 65536 elements).
CHECK_EVERY=N checks every Nth step instead of every 4th (the checks allocate CPU tensors of
their own: a run with another cadence makes the same tensors in a different allocation
order, which bench/gpu/python/steadiness.py uses).
Usage: python3 torch_loop.py [steps]   (default 80)"""
import json
import os
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 80
by_hand = os.environ.get("BY_HAND") == "1"
check_every = int(os.environ.get("CHECK_EVERY", "4"))
HOT, COLD = 3, 4
HOT_FLOATS = 16 << 20  # 64 MiB
OUT_FLOATS = 8 << 20  # 32 MiB
LARGE_FLOATS = 256 << 20  # 1 GiB
MARK = 1024
dev = torch.device("cuda")
torch.zeros(1, device=dev)
torch.cuda.synchronize()  # the CUDA context, outside the timed part


def pattern_into(t, salt):
    """Small integers (exact in float32), different for every tensor."""
    t.copy_(torch.arange(t.numel(), dtype=torch.int32).remainder_(4099).add_(16 * salt))
    return t


def pattern_gpu(n, salt):
    return torch.arange(n, dtype=torch.int32, device=dev).remainder_(4099).add_(16 * salt).float()


h2d = d2h = h2d_bytes = d2h_bytes = 0
checks = mismatches = 0
check_seconds = 0.0
start = time.perf_counter()
hot = [pattern_into(torch.empty(HOT_FLOATS, pin_memory=by_hand), i) for i in range(HOT)]
cold = [pattern_into(torch.empty(HOT_FLOATS), 10 + i) for i in range(COLD)]
large = torch.empty(LARGE_FLOATS)
large.fill_(1.0)
out_buf = torch.empty(OUT_FLOATS, pin_memory=True) if by_hand else None
cold_gpu = []
for c in cold:
    cold_gpu.append(c.to(dev))
    h2d += 1
    h2d_bytes += c.numel() * 4
torch.cuda.synchronize()
loop_start = time.perf_counter()
for step in range(steps):
    for h in hot:
        h[:MARK] = step
        h[-MARK:] = step
    x0 = hot[0].cuda(non_blocking=by_hand)
    x1 = hot[1].to(dev, non_blocking=True)
    x2 = hot[2].to(dev, non_blocking=True)
    h2d += 3
    h2d_bytes += 3 * HOT_FLOATS * 4
    y = x0[:OUT_FLOATS] * 2 + x1[OUT_FLOATS:] - x2[:OUT_FLOATS] * 0.5 + step
    if by_hand:
        out_buf.copy_(y, non_blocking=True)
        torch.cuda.current_stream().synchronize()
        result = out_buf
    else:
        result = y.cpu()  # a fresh pageable tensor every step
    d2h += 1
    d2h_bytes += OUT_FLOATS * 4
    if step % check_every == 0 or step == steps - 1:
        began = time.perf_counter()
        for i, x in enumerate((x0, x1, x2)):
            expected = pattern_gpu(HOT_FLOATS, i)
            expected[:MARK] = step
            expected[-MARK:] = step
            checks += 1
            mismatches += int(not torch.equal(x, expected))
        expected = hot[0][:OUT_FLOATS] * 2 + hot[1][OUT_FLOATS:] - hot[2][:OUT_FLOATS] * 0.5 + step
        checks += 1
        mismatches += int(not torch.equal(result, expected))
        check_seconds += time.perf_counter() - began
torch.cuda.synchronize()
end = time.perf_counter()
seconds = end - start - check_seconds
loop_seconds = end - loop_start - check_seconds
for i, c in enumerate(cold_gpu):
    checks += 1
    mismatches += int(not torch.equal(c, pattern_gpu(HOT_FLOATS, 10 + i)))
checks += 1
mismatches += int(not bool((large[::65536] == 1.0).all()))
pinned = (HOT * HOT_FLOATS + OUT_FLOATS) * 4 if by_hand else 0
print(json.dumps({"program": "torch_loop", "steps": steps, "by_hand": by_hand,
                  "seconds": seconds, "loop_seconds": loop_seconds,
                  "h2d": h2d, "h2d_bytes": h2d_bytes, "d2h": d2h, "d2h_bytes": d2h_bytes,
                  "checks": checks, "mismatches": mismatches,
                  "pinned_by_hand_bytes": pinned, "pinned_requested_bytes": pinned}))
