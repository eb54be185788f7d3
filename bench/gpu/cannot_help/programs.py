"""Programs hotpin cannot help (#40 item 1): under `hotpin run` each must stay within 1.02x of
its time as written. Each checks what it computed and prints one JSON line: program, seconds
(from the start of its work to the end), checks, mismatches.
Usage: programs.py NAME, NAME one of: loader_pageable loader_pinned loader_inline compute
small_copies small_allocs forks device_only. The loaders add where their time went: until the
first batch (the workers' start), waiting for later batches, in `.cuda()`, in the model."""
import json, os, sys, time

import torch

name = sys.argv[1]
torch.manual_seed(0)
checks = mismatches = 0


class Batches(torch.utils.data.Dataset):
    """120 batches of 16 MiB (4 MiB floats), made in the workers."""

    def __len__(self):
        return 120

    def __getitem__(self, i):
        return torch.full((1024, 4096), float(i % 97))


parts = {}


def loader(pin, workers=2):
    global checks, mismatches
    model = torch.nn.Linear(4096, 256).cuda()
    data = torch.utils.data.DataLoader(Batches(), batch_size=None, num_workers=workers,
                                       pin_memory=pin, prefetch_factor=2 if workers else None)
    clock = time.perf_counter
    first = wait = copy = step = 0.0
    it, i, t = iter(data), 0, clock()
    while True:
        try:
            batch = next(it)
        except StopIteration:
            break
        got = clock()
        if i == 0:
            first = got - t
        else:
            wait += got - t
        x = batch.cuda(non_blocking=pin)
        copied = clock()
        copy += copied - got
        y = model(x)
        checks += 1
        mismatches += int(x[0, 0].item() != float(i % 97))
        t = clock()
        step += t - copied
        i += 1
    torch.cuda.synchronize()
    parts.update(first_batch=round(first, 4), waiting=round(wait, 4), copying=round(copy, 4),
                 model=round(step, 4))


def compute():
    global checks, mismatches
    a = torch.randn(4096, 4096, device="cuda")
    for _ in range(200):
        a = torch.tanh(a @ a.T / 4096)
    torch.cuda.synchronize()
    checks, mismatches = 1, int(not torch.isfinite(a).all().item())


def small_copies():
    global checks, mismatches
    host = [torch.full((4096,), float(i)) for i in range(64)]  # 16 KiB each
    for step in range(300):
        for i, h in enumerate(host):
            d = h.cuda()
            if step % 50 == 0:
                checks += 1
                mismatches += int(d[0].item() != float(i))


def small_allocs():
    global checks, mismatches
    total = 0.0
    for step in range(20000):
        t = torch.ones(256)  # 1 KiB
        l = [step] * 100
        total += t.sum().item() + len(l)
    checks, mismatches = 1, int(total != 20000 * 356.0)


def work(i):
    return sum(range(i * 1000))


def forks():
    global checks, mismatches
    import multiprocessing as mp
    x = torch.ones(1024, device="cuda")  # CUDA in the parent before the forks
    for _ in range(10):
        with mp.get_context("fork").Pool(4) as pool:
            got = pool.map(work, range(16))
        checks += 1
        mismatches += int(got != [work(i) for i in range(16)])
    mismatches += int(x.sum().item() != 1024)


def device_only():
    global checks, mismatches
    bufs = [torch.empty(64 << 20, dtype=torch.uint8, device="cuda") for _ in range(8)]
    for step in range(200):
        for b in bufs:
            b.fill_(step % 251)
        src, dst = bufs[step % 8], bufs[(step + 1) % 8]
        dst.copy_(src)
    torch.cuda.synchronize()
    checks, mismatches = 1, int(bufs[0][0].item() != 199)


torch.cuda.init()
torch.empty(1, device="cuda")
began = time.perf_counter()
{"loader_pageable": lambda: loader(False), "loader_pinned": lambda: loader(True),
 "loader_inline": lambda: loader(False, workers=0),
 "compute": compute, "small_copies": small_copies, "small_allocs": small_allocs,
 "forks": forks, "device_only": device_only}[name]()
seconds = time.perf_counter() - began
print(json.dumps({"program": name, "seconds": round(seconds, 4), "checks": checks,
                  "mismatches": mismatches, **parts}))
sys.exit(1 if mismatches else 0)
