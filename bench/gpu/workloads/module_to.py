"""`module.to("cuda")` / `.to("cpu")` round trips, the plainest way to run a model larger than
the GPU's memory one layer at a time (low-VRAM modes do this): 16 linear layers of 4096 x 4096
fp32 (1 GiB) kept on the CPU; each forward moves each layer to the GPU, runs it, and moves it
back (`module.to`, which gives the weights fresh CPU memory each time). FORWARDS (default 4)
forwards of a batch of 256; the output and the weights are checked bit for bit against the
program as written. LAYERS and WIDTH change the shape (WIDTH=8192 LAYERS=4: 256 MiB layers,
over the 64 MiB hotpin registers at birth; the reference run must use the same).

BY_HAND=1: what an expert writes instead, each layer's CPU copy kept in pinned memory made once
(outside the timed part), the round trip as `p.data = pinned.to("cuda", non_blocking=True)`
and back with `pinned.copy_(p.data, non_blocking=True)` and a synchronise: 1 GiB pinned."""
import os
import time

import common
import torch

forwards = int(os.environ.get("FORWARDS", "4"))
LAYERS = int(os.environ.get("LAYERS", "16"))
WIDTH = int(os.environ.get("WIDTH", "4096"))
BATCH = 256
common.start()
layers = [torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(LAYERS)]
x0 = torch.randn(BATCH, WIDTH, device="cuda")
pinned = []
if common.BY_HAND:
    pinned = [[p.data.pin_memory() for p in layer.parameters()] for layer in layers]
torch.cuda.synchronize()
began = time.perf_counter()
with torch.no_grad():
    for _ in range(forwards):
        x = x0
        for i, layer in enumerate(layers):
            if common.BY_HAND:
                for p, host in zip(layer.parameters(), pinned[i]):
                    p.data = host.to("cuda", non_blocking=True)
            else:
                layer.to("cuda")
            x = torch.tanh(layer(x))
            if common.BY_HAND:
                for p, host in zip(layer.parameters(), pinned[i]):
                    host.copy_(p.data, non_blocking=True)
                    p.data = host
                torch.cuda.synchronize()
            else:
                layer.to("cpu")
torch.cuda.synchronize()
seconds = time.perf_counter() - began
checks, wrong = common.same_as_written("module_to", {
    "output": x, "weights": torch.cat([layer.weight.detach().view(-1) for layer in layers])})
common.emit(seconds, checks, wrong, LAYERS * WIDTH * WIDTH * 4, forwards=forwards)
