"""Unmodified PyTorch program 2: a DataLoader with pin_memory=True over a dataset larger than
its batches (1 GiB of samples, 16 MiB batches), each batch moved with non_blocking=True.
No hotpin code. Prints its own ground truth and its time."""
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
h2d = h2d_bytes = 0
torch.cuda.synchronize()
start = time.perf_counter()
for epoch in range(epochs):
    for xb, yb in loader:
        x = xb.to(dev, non_blocking=True)
        y = yb.to(dev, non_blocking=True)
        h2d += 2
        h2d_bytes += xb.numel() * 4 + yb.numel() * 8
        loss = (x @ weight).sum()
torch.cuda.synchronize()
seconds = time.perf_counter() - start
print(json.dumps({"program": "dataloader_pinned", "epochs": epochs, "seconds": seconds,
                  "h2d": h2d, "h2d_bytes": h2d_bytes, "d2h": 0, "d2h_bytes": 0}))
