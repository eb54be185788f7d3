"""Programs hotpin cannot help (#40 item 1): under `hotpin run` each must stay within 1.02x of
its time as written. Each checks what it computed and prints one JSON line: program, seconds
(from the start of its work to the end), checks, mismatches, and `phases` (../workloads/
common.py's). What it computed is checked twice: by the program itself (a batch's value, the
workers' sums), and, where WANT_DIR is set (gated.py sets it), bit for bit against what the
program as written computed (common.py's `same_as_written`: the loaders' summed model outputs,
the matrix, the copies' last values, the forks' results, samples of the device buffers).
Under gated.py (HOTPIN_BENCH_GATE) each waits at common.py's gates once CUDA has started and
once its work is done, so that its timed part runs alone. These programs keep PyTorch's
defaults (common.py's `start()`, which asks for deterministic algorithms, is not called; the
cuBLAS workspace setting its import makes is the one thing they share with the workloads).
Usage: programs.py NAME, NAME one of: loader_pageable loader_pinned loader_inline compute
small_copies small_allocs forks device_only. The loaders add where their time went: until the
first batch (the workers' start), waiting for later batches, in `.cuda()`, in the model; forks
adds its pools' starts (the forks), maps and ends (terminate and join), summed over the ten."""
import os, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workloads"))
import common  # noqa: E402  (imports torch)
import torch  # noqa: E402

name = sys.argv[1]
torch.manual_seed(0)
checks = mismatches = 0
result = None  # what is checked against the program as written


class Batches(torch.utils.data.Dataset):
    """120 batches of 16 MiB (4 MiB floats), made in the workers."""

    def __len__(self):
        return 120

    def __getitem__(self, i):
        return torch.full((1024, 4096), float(i % 97))


parts = {}


def loader(pin, workers=2):
    global checks, mismatches, result
    model = torch.nn.Linear(4096, 256).cuda()
    data = torch.utils.data.DataLoader(Batches(), batch_size=None, num_workers=workers,
                                       pin_memory=pin, prefetch_factor=2 if workers else None)
    clock = time.perf_counter
    first = wait = copy = step = 0.0
    outputs = torch.zeros(1024, 256, device="cuda")
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
        outputs += y
        checks += 1
        mismatches += int(x[0, 0].item() != float(i % 97))
        t = clock()
        step += t - copied
        i += 1
    torch.cuda.synchronize()
    result = outputs
    parts.update(first_batch=round(first, 4), waiting=round(wait, 4), copying=round(copy, 4),
                 model=round(step, 4))


def compute():
    global checks, mismatches, result
    a = torch.randn(4096, 4096, device="cuda")
    for _ in range(200):
        a = torch.tanh(a @ a.T / 4096)
    torch.cuda.synchronize()
    checks, mismatches = 1, int(not torch.isfinite(a).all().item())
    result = a


def small_copies():
    global checks, mismatches, result
    host = [torch.full((4096,), float(i)) for i in range(64)]  # 16 KiB each
    last = []  # the last step's copies
    for step in range(300):
        for i, h in enumerate(host):
            d = h.cuda()
            if step == 299:
                last.append(d)
            if step % 50 == 0:
                checks += 1
                mismatches += int(d[0].item() != float(i))
    result = torch.stack(last)


def small_allocs():
    global checks, mismatches, result
    total = 0.0
    for step in range(20000):
        t = torch.ones(256)  # 1 KiB
        l = [step] * 100
        total += t.sum().item() + len(l)
    checks, mismatches = 1, int(total != 20000 * 356.0)
    result = torch.tensor([total], dtype=torch.float64)


def work(i):
    return sum(range(i * 1000))


def forks():
    global checks, mismatches, result
    import multiprocessing as mp
    x = torch.ones(1024, device="cuda")  # CUDA in the parent before the forks
    every = []
    clock = time.perf_counter
    starts, maps, ends = [], [], []  # each pool's start (4 forks), map and end (terminate, join)
    for _ in range(10):
        t = clock()
        with mp.get_context("fork").Pool(4) as pool:
            started = clock()
            got = pool.map(work, range(16))
            mapped = clock()
        starts.append(started - t)
        maps.append(mapped - started)
        ends.append(clock() - mapped)
        every += got
        checks += 1
        mismatches += int(got != [work(i) for i in range(16)])
    mismatches += int(x.sum().item() != 1024)
    result = torch.tensor(every, dtype=torch.int64)
    parts.update(pool_start=round(sum(starts), 4), pool_map=round(sum(maps), 4),
                 pool_end=round(sum(ends), 4))


def device_only():
    global checks, mismatches, result
    bufs = [torch.empty(64 << 20, dtype=torch.uint8, device="cuda") for _ in range(8)]
    for step in range(200):
        for b in bufs:
            b.fill_(step % 251)
        src, dst = bufs[step % 8], bufs[(step + 1) % 8]
        dst.copy_(src)
    torch.cuda.synchronize()
    checks, mismatches = 1, int(bufs[0][0].item() != 199)
    result = torch.stack([b[::65536] for b in bufs])


torch.cuda.init()
torch.empty(1, device="cuda")
common.ready()
began = time.perf_counter()
{"loader_pageable": lambda: loader(False), "loader_pinned": lambda: loader(True),
 "loader_inline": lambda: loader(False, workers=0),
 "compute": compute, "small_copies": small_copies, "small_allocs": small_allocs,
 "forks": forks, "device_only": device_only}[name]()
seconds = time.perf_counter() - began
same, wrong = common.same_as_written(name, result)
common.emit(seconds, checks + same, mismatches + wrong, 0, program=name, **parts)
