"""Unmodified PyTorch program 2: a DataLoader with pin_memory=True over a dataset larger than
its batches (1 GiB of samples, 16 MiB batches), each batch moved with non_blocking=True.
No hotpin code. Prints its own ground truth, its time and the checks of what it computed (every
8th batch: the batch on the GPU against the loader's, 1 in 64 columns, and its labels in full;
their time is not counted)."""
import json
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
samples, features = 1 << 16, 4096  # 65536 x 4096 floats = 1 GiB
batch = 1024  # 16 MiB a batch
data = torch.randn(samples, features)
labels = torch.randint(0, 10, (samples,))
loader = DataLoader(TensorDataset(data, labels), batch_size=batch, pin_memory=True,
                    num_workers=2, shuffle=False)
dev = torch.device("cuda")
weight = torch.randn(features, 10, device=dev)
h2d = h2d_bytes = d2h = d2h_bytes = 0
checks = mismatches = 0
check_seconds = 0.0
torch.cuda.synchronize()
start = time.perf_counter()
for epoch in range(epochs):
    for i, (xb, yb) in enumerate(loader):
        x = xb.to(dev, non_blocking=True)
        y = yb.to(dev, non_blocking=True)
        h2d += 2
        h2d_bytes += xb.numel() * 4 + yb.numel() * 8
        loss = (x @ weight).sum()
        if i % 8 == 0:
            began = time.perf_counter()
            first = i * batch
            expected_x = data[first:first + batch, ::64].contiguous()
            expected_y = labels[first:first + batch]
            seen_x, seen_y = x[:, ::64].cpu(), y.cpu()
            d2h += 2
            d2h_bytes += seen_x.numel() * 4 + seen_y.numel() * 8
            checks += 2
            mismatches += int(not torch.equal(seen_x, expected_x))
            mismatches += int(not torch.equal(seen_y, expected_y))
            check_seconds += time.perf_counter() - began
torch.cuda.synchronize()
seconds = time.perf_counter() - start - check_seconds
print(json.dumps({"program": "dataloader_pinned", "epochs": epochs, "seconds": seconds,
                  "h2d": h2d, "h2d_bytes": h2d_bytes, "d2h": d2h, "d2h_bytes": d2h_bytes,
                  "checks": checks, "mismatches": mismatches}))
