"""Online decisions, PyTorch program 3: a DataLoader that pins its batches itself. No hotpin
code.

A synthetic in-memory dataset of 512 MiB (rows of 4096 floats; element (i, j) holds
(7 i + j) mod 65536) served in batches of 32 MiB (2048 rows) by a DataLoader with
pin_memory=True, 2 worker processes (forked, started anew each epoch: persistent workers made
the program's exit take 10 s more) and prefetch_factor 2; each worker returns its batch as a
fresh tensor (a clone of the rows, which PyTorch moves into shared memory), the loader's
pinning thread copies it into pinned memory (PyTorch's caching host allocator: cudaHostAlloc,
blocks reused), and the loop moves each batch to the GPU with .cuda(non_blocking=True).

BY_HAND=1 runs the same program: pin_memory=True is already the by-hand version (nothing
more to pin). pinned_by_hand_bytes is then the loader's pinned memory as best estimated:
batch bytes x workers x prefetch_factor = 128 MiB (0 without BY_HAND).

Prints one JSON line: its own ground truth (copies and bytes per direction), `seconds` (from
the dataset's allocation to the end of the last epoch: building the dataset, starting the
workers, the epochs; checks not counted), `loop_seconds` (the epochs alone), checks and
mismatches. Checks (every batch; on the GPU, not timed): the batch on the GPU in full against
the values computed on the GPU.
Usage: python3 dataloader.py [epochs]   (default 4)"""
import json
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 4
by_hand = os.environ.get("BY_HAND") == "1"
COLS = 4096
BATCH_ROWS = 2048  # 32 MiB a batch
BATCHES = 16  # 512 MiB of data
WORKERS, PREFETCH = 2, 2
BATCH_BYTES = BATCH_ROWS * COLS * 4
dev = torch.device("cuda")
torch.zeros(1, device=dev)
torch.cuda.synchronize()  # the CUDA context, outside the timed part


def values(first_row, rows, device):
    r = torch.arange(first_row, first_row + rows, dtype=torch.int32, device=device)
    c = torch.arange(COLS, dtype=torch.int32, device=device)
    return ((r.unsqueeze(1) * 7 + c.unsqueeze(0)) % 65536).float()


class Batches(Dataset):
    """Batch i is rows i*BATCH_ROWS .. (i+1)*BATCH_ROWS, as a fresh tensor."""

    def __init__(self, data):
        self.data = data

    def __len__(self):
        return BATCHES

    def __getitem__(self, i):
        return self.data[i * BATCH_ROWS:(i + 1) * BATCH_ROWS].clone()


h2d = d2h = h2d_bytes = d2h_bytes = 0
checks = mismatches = 0
check_seconds = 0.0
start = time.perf_counter()
data = torch.empty(BATCHES * BATCH_ROWS, COLS)
for i in range(BATCHES):
    data[i * BATCH_ROWS:(i + 1) * BATCH_ROWS] = values(i * BATCH_ROWS, BATCH_ROWS, "cpu")
loader = DataLoader(Batches(data), batch_size=None, shuffle=False, num_workers=WORKERS,
                    pin_memory=True, prefetch_factor=PREFETCH,
                    multiprocessing_context="fork")
weight = torch.ones(COLS, dtype=torch.float64, device=dev)
loop_start = time.perf_counter()
total = torch.zeros((), dtype=torch.float64, device=dev)
for epoch in range(epochs):
    for i, batch in enumerate(loader):
        x = batch.cuda(non_blocking=True)
        h2d += 1
        h2d_bytes += batch.numel() * 4
        total += (x.double() @ weight).sum()
        began = time.perf_counter()
        checks += 1
        mismatches += int(not torch.equal(x, values(i * BATCH_ROWS, BATCH_ROWS, dev)))
        check_seconds += time.perf_counter() - began
torch.cuda.synchronize()
end = time.perf_counter()
# What the loop computed from all batches (in float64 on the GPU) against the CPU's sum of
# the dataset (exact: integers, the total below 2**53).
expected_total = float(data.sum(dtype=torch.float64)) * epochs
got_total = float(total)
d2h += 1
d2h_bytes += 8
checks += 1
mismatches += int(got_total != expected_total)
pinned = BATCH_BYTES * WORKERS * PREFETCH if by_hand else 0
print(json.dumps({"program": "dataloader", "epochs": epochs, "by_hand": by_hand,
                  "seconds": end - start - check_seconds,
                  "loop_seconds": end - loop_start - check_seconds,
                  "h2d": h2d, "h2d_bytes": h2d_bytes, "d2h": d2h, "d2h_bytes": d2h_bytes,
                  "checks": checks, "mismatches": mismatches,
                  "pinned_by_hand_bytes": pinned, "pinned_requested_bytes": pinned}))
