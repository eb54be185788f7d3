"""Known copies through PyTorch: pageable and pinned, both directions, blocking and
non_blocking. Prints what it did as JSON, for comparison with what the tracer recorded."""
import json
import torch

N = 1 << 20          # float32 elements: 4 MiB per copy
K = 100              # copies of each kind

dev = torch.device("cuda")
g = torch.empty(N, device=dev)
x = torch.ones(N)                 # pageable
p = torch.ones(N).pin_memory()    # pinned (cudaHostAlloc through PyTorch's host allocator)
torch.cuda.synchronize()
for _ in range(K):
    g.copy_(x)                    # pageable host-to-device, blocking
    x.copy_(g)                    # pageable device-to-host, blocking
for _ in range(K):
    g.copy_(p, non_blocking=True) # pinned host-to-device, async
    p.copy_(g, non_blocking=True) # pinned device-to-host, async
torch.cuda.synchronize()
print(json.dumps({
    "h2d": 2 * K, "d2h": 2 * K, "bytes_per_copy": N * 4,
    "pageable_ptr": x.data_ptr(), "pinned_ptr": p.data_ptr(),
    "pageable_transfers": 2 * K, "pinned_transfers": 2 * K,
}))
