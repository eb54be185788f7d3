"""A training-like PyTorch program on hotpin's allocator (allocator/python/hotpin_torch.py):
every step builds a fresh batch in host memory from a dataset held in RAM and copies it to
the GPU for a small model step; two large tensors (a checkpoint) move once each way; the
dataset itself never moves. The allocator's mode comes from HOTPIN_MODE (and HOTPIN_HISTORY).
Prints one JSON line: median step time, setup and total time, hotpin's pinned bytes.

Usage: torch_train.py [steps] [batch MiB]
"""
import json
import os
import sys
import time

sys.path.insert(0, os.environ.get("HOTPIN_PYTHON", os.path.join(os.path.dirname(__file__), "../../allocator/python")))
import hotpin_torch  # noqa: E402  (loads libhotpin before torch loads CUDA)
import torch  # noqa: E402

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
batch_mib = int(sys.argv[2]) if len(sys.argv) > 2 else 64
D = 4096
B = batch_mib * (1 << 20) // (4 * D)
SAMPLES = 8 * B                         # the dataset: 8 batches' worth, kept in RAM
torch.manual_seed(0)
torch.cuda.init()
t_start = time.perf_counter()

dataset = hotpin_torch.empty((SAMPLES, D))          # cold: read on the CPU only
dataset.copy_(torch.randn(SAMPLES, D))
checkpoint = [hotpin_torch.empty((16384, D)) for _ in range(2)]   # 2 x 256 MiB, moved once
for t in checkpoint:
    t.normal_()
model = torch.nn.Sequential(torch.nn.Linear(D, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
on_gpu = [t.cuda() for t in checkpoint]              # the checkpoint goes up once
target = torch.randint(0, 10, (B,), device="cuda")
torch.cuda.synchronize()
setup_s = time.perf_counter() - t_start

times = []
for step in range(steps):
    t0 = time.perf_counter()
    first = (step % 8) * B
    batch = hotpin_torch.empty((B, D))                # a fresh batch buffer every step
    batch.copy_(dataset[first:first + B])
    x = batch.cuda()                                  # the hot copy
    loss = torch.nn.functional.cross_entropy(model(x), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
    del batch, x

for host, dev in zip(checkpoint, on_gpu):            # and comes back once
    host.copy_(dev)
torch.cuda.synchronize()
total_s = time.perf_counter() - t_start
stats = hotpin_torch.stats()
timed = sorted(times[10:])
print(json.dumps({
    "mode": os.environ.get("HOTPIN_MODE", "pin-none"),
    "steps": steps,
    "batch_mib": batch_mib,
    "median_step_ms": round(1e3 * timed[len(timed) // 2], 3),
    "setup_s": round(setup_s, 3),
    "total_s": round(total_s, 3),
    "peak_pinned_mib": round(stats["peak_pinned_bytes"] / (1 << 20), 1),
    "pinned_allocations": stats["pinned_allocations"],
    "pageable_allocations": stats["pageable_allocations"],
    "cache_hits": stats["cache_hits"],
    "pin_time_s": round(stats["pin_time_ns"] / 1e9, 3),
    "loss": round(loss.item(), 4),
}))
