"""Where module_to.py's time goes, phase by phase (a diagnosis, not a workload): the same loop,
the device synchronised after each phase, the time of each summed over the forwards after the
first: `.to("cuda")` (by hand: the pinned copies' H2D), the layer, `.to("cpu")` (by hand: the
copies back). One JSON line. FORWARDS (default 8); BY_HAND=1 as in module_to.py;
DETERMINISTIC=1 asks PyTorch for deterministic algorithms as module_to.py does (common.py),
which also fills every new tensor `torch.empty` makes (`.to("cpu")`'s) before it is copied into.
Usage: [BY_HAND=1] python3 module_to_phases.py"""
import json
import os
import time

import torch

forwards = int(os.environ.get("FORWARDS", "8"))
by_hand = os.environ.get("BY_HAND") == "1"
if os.environ.get("DETERMINISTIC") == "1":
    torch.use_deterministic_algorithms(True, warn_only=True)
layers = [torch.nn.Linear(4096, 4096, bias=False) for _ in range(16)]
x0 = torch.randn(256, 4096, device="cuda")
pinned = [[p.data.pin_memory() for p in layer.parameters()] for layer in layers] if by_hand else []
phase = {"to_cuda": 0.0, "layer": 0.0, "to_cpu": 0.0}


def timed(name, counted, work):
    t = time.perf_counter()
    out = work()
    torch.cuda.synchronize()
    if counted:
        phase[name] += time.perf_counter() - t
    return out


def to_cuda(i, layer):
    if by_hand:
        for p, host in zip(layer.parameters(), pinned[i]):
            p.data = host.to("cuda", non_blocking=True)
    else:
        layer.to("cuda")


def to_cpu(i, layer):
    if by_hand:
        for p, host in zip(layer.parameters(), pinned[i]):
            host.copy_(p.data, non_blocking=True)
            p.data = host
    else:
        layer.to("cpu")


torch.cuda.synchronize()
with torch.no_grad():
    for f in range(forwards):
        x = x0
        for i, layer in enumerate(layers):
            timed("to_cuda", f > 0, lambda: to_cuda(i, layer))
            x = timed("layer", f > 0, lambda: torch.tanh(layer(x)))
            timed("to_cpu", f > 0, lambda: to_cpu(i, layer))
steps = (forwards - 1) * len(layers)
print(json.dumps({"by_hand": by_hand, "steps": steps,
                  "deterministic": torch.are_deterministic_algorithms_enabled(),
                  **{k: round(v / steps * 1e3, 3) for k, v in phase.items()},
                  "sum": float(x.double().sum())}))
