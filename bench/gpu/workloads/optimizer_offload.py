"""A CPU-offloaded optimizer as DeepSpeed's ZeRO-Offload runs one (`offload_optimizer:
{device: cpu, pin_memory: false}`, its default): a faithful imitation, not DeepSpeed itself
(DeepSpeed's CPU Adam is a C++ extension built at install or first use, which the GPU machine
cannot build without a network; this program follows DeepSpeed's stage-2 step instead,
deepspeed/runtime/zero/stage_1_and_2.py). The model (8 bf16 linear layers of 2816 x 2816, 63 M
parameters) lives on the GPU; its fp32 master weights and an fp32 gradient buffer live in CPU
memory, allocated once. Each step: forward and backward on the GPU; the gradients copied into
the CPU buffer (`copy_(..., non_blocking=True)`, converted to fp32 on the GPU, as DeepSpeed's
`async_inplace_copy_grad_to_fp32_buffer_from_gpu`); Adam on the CPU (PyTorch's own, in place of
DeepSpeed's C++ one); the updated masters copied back into the bf16 GPU parameters (`copy_`,
blocking, as DeepSpeed writes it: PyTorch converts on the CPU into a temporary first). STEPS
(default 10) steps; the final weights are checked bit for bit against the program as written.

BY_HAND=1: DeepSpeed's `pin_memory: true`, the masters and the gradient buffer allocated
pinned (what an expert sets)."""
import os
import time

import common
import torch

steps = int(os.environ.get("STEPS", "10"))
LAYERS, WIDTH, BATCH = 8, 2816, 512
common.start()
model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(LAYERS)])
model = model.to("cuda", dtype=torch.bfloat16)
params = list(model.parameters())
n = sum(p.numel() for p in params)
began = time.perf_counter()
master = torch.empty(n, dtype=torch.float32, pin_memory=common.BY_HAND)
grads = torch.zeros(n, dtype=torch.float32, pin_memory=common.BY_HAND)
offset = 0
for p in params:
    master[offset:offset + p.numel()].copy_(p.detach().view(-1))
    offset += p.numel()
master.requires_grad_(True)
master.grad = grads
opt_kwargs = {"lr": 1e-3}
try:
    opt = torch.optim.Adam([master], fused=True, **opt_kwargs)
except (RuntimeError, TypeError):
    opt = torch.optim.Adam([master], foreach=True, **opt_kwargs)
x = torch.randn(BATCH, WIDTH, device="cuda", generator=None).to(torch.bfloat16)
for step in range(steps):
    loss = model(x).float().pow(2).mean()
    loss.backward()
    offset = 0
    for p in params:
        grads[offset:offset + p.numel()].copy_(p.grad.view(-1), non_blocking=True)
        p.grad = None
        offset += p.numel()
    torch.cuda.synchronize()
    opt.step()
    offset = 0
    with torch.no_grad():
        for p in params:
            p.view(-1).copy_(master[offset:offset + p.numel()])
            offset += p.numel()
torch.cuda.synchronize()
seconds = time.perf_counter() - began
checks, wrong = common.same_as_written("optimizer_offload", {
    "master": master.detach(), "weights": torch.cat([p.detach().view(-1) for p in params])})
common.emit(seconds, checks, wrong, 2 * n * 4, steps=steps, parameters=n)
