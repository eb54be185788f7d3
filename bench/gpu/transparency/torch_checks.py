"""Unmodified PyTorch program that checks its own results: host memory used as CUDA's rules
for pageable and pinned memory allow, so it computes the same answers whether or not
something pins its memory behind its back. No hotpin code.

Checks (each step counted; a mismatch is a step whose data was wrong):
- h2d_overwrite: a reused pageable CPU tensor copied with non_blocking=True, overwritten at
  once (an async copy from pageable memory returns once the source is staged).
- d2h_read_at_once / d2h_fresh_read_at_once: a reused / fresh pageable CPU tensor filled by
  copy_(gpu, non_blocking=True) and read at once, no synchronize (an async copy into
  pageable memory returns only when it is complete).
- free_then_alloc: a pageable tensor copied non_blocking, deleted, a new one of the same size
  allocated and filled at once; the GPU copy must hold the first one's data.
- pin_memory: t.pin_memory() is pinned and equal to t; a non_blocking copy from it, checked
  after synchronize. pin_memory_copy: pin_memory() of a pageable tensor is a copy (writing t
  afterwards leaves p alone). The is_pinned answers are printed under "observed".
- dataloader: DataLoader(pin_memory=True, num_workers=2), non_blocking copies, sums checked.
- cuda_graph: a CUDA graph capturing copies from and to pinned static buffers (pinned as the
  program wrote it: capture of pageable copies is refused by CUDA), replayed with new inputs.

Before each asynchronous copy the GPU is kept busy (torch.cuda._sleep), so that a copy that
is really asynchronous has not started when the program touches the memory: a transparency
defect then shows as a mismatch every time rather than by chance.

Prints one JSON line: {"program", "seconds", "checks": {name: [checks, mismatches]},
"observed", "copies", "errors", "details"}. Exits 0 when every check ran (mismatches
included); 1 if a check raised (its traceback on stderr, its name under "errors")."""
import time

WALL0 = time.perf_counter()

import gc  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset  # noqa: E402

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 12
N = 8 << 20  # int32 elements: 32 MiB buffers
DELAY_CYCLES = 20_000_000  # ~11 ms of GPU spin at 1.75 GHz
DEV = torch.device("cuda")

from tally import count, d2h, h2d, observed, run_all, salt  # noqa: E402,F401


def busy():
    """Keeps the current stream busy for a while, so what is queued next waits."""
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(DELAY_CYCLES)
    else:
        m = busy.m if hasattr(busy, "m") else torch.ones(2048, 2048, device=DEV)
        busy.m = m
        for _ in range(40):
            m = m @ busy.m * 1e-3


def bad_elements(a, b):
    return int((a != b).sum().item())


def check_h2d_overwrite(cpu_base, dev_base):
    src = torch.empty(N, dtype=torch.int32)  # pageable, reused
    dst = torch.empty(N, dtype=torch.int32, device=DEV)
    for step in range(STEPS):
        k = salt(step, 1)
        torch.add(cpu_base, k, out=src)
        busy()
        if step % 2 == 0:
            dst.copy_(src, non_blocking=True)
            d = dst
        else:
            d = src.to(DEV, non_blocking=True)
        h2d(src.numel() * 4)
        src.fill_(-1)  # allowed at once: the copy from pageable memory has staged src
        torch.cuda.synchronize()
        ref = dev_base + k
        ok = torch.equal(d, ref)
        count("h2d_overwrite", ok, "" if ok else f"step {step}: {bad_elements(d, ref)} bad")
    observed["h2d_src_is_pinned"] = bool(src.is_pinned())


def check_d2h_read_at_once(cpu_base, dev_base):
    dst = torch.empty(N, dtype=torch.int32)  # pageable, reused
    dst.fill_(0)
    for step in range(STEPS):
        k = salt(step, 2)
        g = dev_base + k
        busy()
        dst.copy_(g, non_blocking=True)
        d2h(dst.numel() * 4)
        got = dst - cpu_base  # read at once: complete on return for pageable memory
        ok = bool((got == k).all())
        count("d2h_read_at_once", ok, "" if ok else f"step {step}: {int((got != k).sum())} bad")
        torch.cuda.synchronize()
    for step in range(STEPS):
        k = salt(step, 3)
        g = dev_base + k
        fresh = torch.empty(N, dtype=torch.int32)  # fresh pageable memory each step
        busy()
        fresh.copy_(g, non_blocking=True)
        d2h(fresh.numel() * 4)
        got = fresh - cpu_base
        ok = bool((got == k).all())
        count("d2h_fresh_read_at_once", ok,
              "" if ok else f"step {step}: {int((got != k).sum())} bad")
        torch.cuda.synchronize()
        del fresh, got


def check_free_then_alloc(cpu_base, dev_base):
    for step in range(STEPS):
        k = salt(step, 4)
        a = torch.empty(N, dtype=torch.int32)
        torch.add(cpu_base, k, out=a)
        busy()
        d = a.to(DEV, non_blocking=True)
        h2d(a.numel() * 4)
        del a  # allowed: the copy from pageable memory has staged it
        b = torch.empty(N, dtype=torch.int32)
        b.fill_(-7)
        torch.cuda.synchronize()
        ref = dev_base + k
        ok = torch.equal(d, ref)
        count("free_then_alloc", ok, "" if ok else f"step {step}: {bad_elements(d, ref)} bad")
        del b, d


def check_pin_memory(cpu_base, dev_base):
    for step in range(STEPS):
        k = salt(step, 5)
        t = cpu_base + k  # fresh pageable tensor
        t_before = bool(t.is_pinned())
        p = t.pin_memory()
        p_pinned = bool(p.is_pinned())
        aliases = p.data_ptr() == t.data_ptr()
        if step == 0:
            observed["t_is_pinned"] = t_before
            observed["p_is_pinned"] = p_pinned
            observed["p_aliases_t"] = aliases
            observed["t_is_pinned_after"] = bool(t.is_pinned())
        else:
            # Same answers every step, or say which differed.
            if observed["t_is_pinned"] != t_before:
                observed["t_is_pinned_varies"] = True
            if observed["p_is_pinned"] != p_pinned:
                observed["p_is_pinned_varies"] = True
        ok = p_pinned and torch.equal(p, t)
        count("pin_memory", ok, "" if ok else f"step {step}: pinned={p_pinned}")
        # pin_memory() of a pageable tensor is a copy: t may be written now.
        t.fill_(-3)
        ok = bool(((p - cpu_base) == k).all())
        count("pin_memory_copy", ok, "" if ok else f"step {step}: aliases={aliases}")
        busy()
        d = p.to(DEV, non_blocking=True)
        h2d(p.numel() * 4)
        torch.cuda.synchronize()
        got = d.cpu()  # p was not written since the copy: d must hold what p holds
        ok = torch.equal(got, p)
        count("pin_memory_h2d", ok, "" if ok else f"step {step}: {bad_elements(got, p)} bad")
        del t, p, d, got


def check_dataloader():
    samples, features, batch = 65536, 1024, 4096  # 256 MiB of int32, 16 MiB batches
    data = torch.arange(samples * features, dtype=torch.int32).view(samples, features)
    ds = TensorDataset(data)
    sampler = BatchSampler(SequentialSampler(ds), batch_size=batch, drop_last=False)
    loader = DataLoader(ds, batch_size=None, sampler=sampler, num_workers=2, pin_memory=True)
    per = batch * features
    seen = 0
    for i, (xb,) in enumerate(loader):
        x = xb.to(DEV, non_blocking=True)
        h2d(xb.numel() * 4)
        got = int(x.sum(dtype=torch.int64).item())
        first = i * per
        want = per * first + per * (per - 1) // 2
        ok = got == want and tuple(xb.shape) == (batch, features)
        count("dataloader", ok, "" if ok else f"batch {i}: sum {got} != {want}")
        seen += 1
    observed["dataloader_batches"] = seen
    del loader, ds, data
    gc.collect()


def check_cuda_graph(cpu_base):
    n = N
    static_in = torch.empty(n, dtype=torch.float32, pin_memory=True)
    static_out = torch.empty(n, dtype=torch.float32, pin_memory=True)
    static_dev = torch.empty(n, dtype=torch.float32, device=DEV)
    observed["graph_in_is_pinned"] = bool(static_in.is_pinned())
    base = (cpu_base % 100000).to(torch.float32)  # exact in float32
    static_in.copy_(base)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up, as torch.cuda.graph asks
        for _ in range(2):
            static_dev.copy_(static_in, non_blocking=True)
            res = static_dev * 2 + 1
            static_out.copy_(res, non_blocking=True)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, capture_error_mode="thread_local"):
        static_dev.copy_(static_in, non_blocking=True)
        res = static_dev * 2 + 1
        static_out.copy_(res, non_blocking=True)
    torch.cuda.synchronize()
    for r in range(max(5, STEPS // 2)):
        k = float((r + 1) * 7)
        torch.add(base, k, out=static_in)
        static_out.fill_(-1)
        g.replay()
        h2d(n * 4)
        d2h(n * 4)
        torch.cuda.synchronize()
        want = (base + k) * 2 + 1
        ok = torch.equal(static_out, want)
        count("cuda_graph", ok,
              "" if ok else f"replay {r}: {bad_elements(static_out, want)} bad")
    del g


def main():
    torch.cuda.init()
    cpu_base = torch.arange(N, dtype=torch.int32)
    dev_base = torch.arange(N, dtype=torch.int32, device=DEV)
    torch.cuda.synchronize()
    start = time.perf_counter()
    return run_all("torch_checks", STEPS, WALL0, start, [
        ("h2d_overwrite", check_h2d_overwrite, (cpu_base, dev_base)),
        ("d2h_read_at_once", check_d2h_read_at_once, (cpu_base, dev_base)),
        ("free_then_alloc", check_free_then_alloc, (cpu_base, dev_base)),
        ("pin_memory", check_pin_memory, (cpu_base, dev_base)),
        ("dataloader", check_dataloader, ()),
        ("cuda_graph", check_cuda_graph, (cpu_base,)),
    ], recover=torch.cuda.synchronize)

if __name__ == "__main__":
    sys.exit(main())
