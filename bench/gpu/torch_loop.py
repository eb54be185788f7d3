"""A training-like loop: a pageable batch built and copied host-to-device every step, then a
small model step. Prints the median time per step (ms) over the timed steps."""
import json
import sys
import time
import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
B, D = 256, 1024
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(D, D), torch.nn.ReLU(), torch.nn.Linear(D, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
target = torch.randint(0, 10, (B,), device="cuda")
times = []
for step in range(steps + 20):
    t0 = time.perf_counter()
    batch = torch.randn(B, D).cuda()          # 1 MiB pageable copy every step
    loss = torch.nn.functional.cross_entropy(model(batch), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    torch.cuda.synchronize()
    if step >= 20:
        times.append(time.perf_counter() - t0)
times.sort()
print(json.dumps({"steps": steps, "median_ms": 1e3 * times[len(times) // 2]}))
