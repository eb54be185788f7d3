"""The torch_loop.py step, in alternating phases within one process, so traced and untraced
phases share the process, its allocations and its GPU state. Before each phase it writes
CTL/ready-N and waits for CTL/go-N (the driver attaches or detaches the tracer in between).
Prints the median step time (ms) of each phase."""
import json
import os
import sys
import time
import torch

phases, steps, ctl = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
B, D = 256, 1024
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(D, D), torch.nn.ReLU(), torch.nn.Linear(D, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
target = torch.randint(0, 10, (B,), device="cuda")


def step():
    batch = torch.randn(B, D).cuda()  # 1 MiB pageable copy every step
    loss = torch.nn.functional.cross_entropy(model(batch), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    torch.cuda.synchronize()


for _ in range(50):
    step()
medians = []
for phase in range(phases):
    open(os.path.join(ctl, f"ready-{phase}"), "w").close()
    while not os.path.exists(os.path.join(ctl, f"go-{phase}")):
        time.sleep(0.005)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    times.sort()
    medians.append(1e3 * times[len(times) // 2])
print(json.dumps({"steps_per_phase": steps, "phase_median_ms": medians}))
