"""Online decisions, PyTorch program 7: layers streamed from CPU memory each forward, as
accelerate's `cpu_offload` streams a model's weights (#40 item 3). No hotpin code.

16 layers of 128 MiB (int32 weights, 2 GiB in all), made by one line of this file, stay in CPU
memory; every forward copies each layer to the GPU (`.to("cuda")`, blocking, as accelerate's
`set_module_tensor_to_device` does) and uses it there. Before each forward the program writes
the forward's number into the first and last 1024 elements of every layer (a copy that did
not happen, or read stale memory, is seen).

BY_HAND=1 is the version a user pins by hand: the layers are allocated pinned
(`pin_memory=True`, outside the timed part). pinned_by_hand_bytes: 16 x 128 MiB (0 without).

Prints one JSON line: its own ground truth (copies and bytes to the GPU), `seconds` (the
forwards, checks included: they are a reduction per layer on the GPU, the layer's use),
checks and mismatches. Checks, every forward and every layer: the markers, and the sum of the
whole layer on the GPU against the sum its pattern must have (exact: int64).
Usage: python3 layer_stream.py [forwards]   (default 7; $STEPS when no argument)"""
import json
import os
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ.get("STEPS", "7"))
by_hand = os.environ.get("BY_HAND") == "1"
LAYERS = 16
INTS = 32 << 20  # 128 MiB of int32
MARK = 1024
dev = torch.device("cuda")
torch.zeros(1, device=dev)
torch.cuda.synchronize()


def pattern_into(t, salt):
    t.copy_(torch.arange(t.numel(), dtype=torch.int32).remainder_(4099).add_(16 * salt))
    return t


layers = [pattern_into(torch.empty(INTS, dtype=torch.int32, pin_memory=by_hand), i) for i in range(LAYERS)]
# What each layer sums to, without its marked ends (they hold the forward's number).
inner = [int(l[MARK:-MARK].sum(dtype=torch.int64)) for l in layers]
h2d = h2d_bytes = checks = mismatches = 0
start = time.perf_counter()
for step in range(steps):
    for l in layers:
        l[:MARK] = step
        l[-MARK:] = step
    for i, l in enumerate(layers):
        w = l.to(dev)
        h2d += 1
        h2d_bytes += INTS * 4
        total = int(w.sum(dtype=torch.int64))
        checks += 1
        mismatches += int(total != inner[i] + 2 * MARK * step
                          or int(w[:MARK].min()) != step or int(w[-MARK:].max()) != step)
        del w
torch.cuda.synchronize()
seconds = time.perf_counter() - start
print(json.dumps({"program": "layer_stream", "steps": steps, "seconds": seconds, "h2d": h2d,
                  "h2d_bytes": h2d_bytes, "d2h": 0, "d2h_bytes": 0, "checks": checks,
                  "mismatches": mismatches,
                  "pinned_by_hand_bytes": LAYERS * INTS * 4 if by_hand else 0}))
