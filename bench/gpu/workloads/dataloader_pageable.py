"""A PyTorch DataLoader without `pin_memory`, as most training scripts start: 2 worker processes
over an in-memory dataset of 512 MiB, batches of 16 MiB, each batch copied to the GPU with
`.cuda(non_blocking=True)` and used by a small model; EPOCHS (default 3). The batches' sums,
computed on the GPU, are checked bit for bit against the program as written.

BY_HAND=1: `pin_memory=True`, PyTorch's own fix (its pinning thread copies each batch into
pinned memory); the bytes it pins are estimated as batch x workers x prefetch factor = 64 MiB.
The batches come from the workers through shared memory, made anew for each batch, which
`hotpin run` does not pin: a program it cannot help, kept here to show it does no harm."""
import os
import time

import common
import torch
from torch.utils.data import DataLoader, Dataset

epochs = int(os.environ.get("EPOCHS", "3"))
ROWS, WIDTH, BATCH = 8192, 16384, 256  # 512 MiB of float32; a batch is 16 MiB


class Rows(Dataset):
    def __init__(self):
        self.data = torch.arange(ROWS * WIDTH, dtype=torch.int32).remainder_(1021).float() \
            .view(ROWS, WIDTH)

    def __len__(self):
        return ROWS

    def __getitem__(self, i):
        return self.data[i]


if __name__ == "__main__":
    common.start()
    loader = DataLoader(Rows(), batch_size=BATCH, shuffle=False, num_workers=2,
                        prefetch_factor=2, pin_memory=common.BY_HAND, persistent_workers=False)
    model = torch.nn.Linear(WIDTH, 256, bias=False).cuda()
    sums = []
    began = time.perf_counter()
    with torch.no_grad():
        for _ in range(epochs):
            for batch in loader:
                b = batch.cuda(non_blocking=True)
                model(b)
                sums.append(b.sum(dim=1, dtype=torch.float64))
    torch.cuda.synchronize()
    seconds = time.perf_counter() - began
    checks, wrong = common.same_as_written("dataloader_pageable", torch.stack(sums))
    common.emit(seconds, checks, wrong, BATCH * WIDTH * 4 * 2 * 2, epochs=epochs)
