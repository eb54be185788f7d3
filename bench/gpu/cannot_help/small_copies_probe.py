"""Where small_copies' time goes (#40 item 1: its first run under `hotpin run` read 2-5% slower
than as written in gated.sh's calls, with hotpin's accounted work a third of that).
docs/benchmarks.md section 2 ("small_copies, localized") says what each mode found.

Usage: python3 small_copies_probe.py MODE, MODE one of:
  offsets  the time of a 16 KiB `.cuda()` copy by the source's offset in its page (64 buffers of
           one large tensor, each at that offset, 300 passes, 3 rounds interleaved)
  lay      small_copies' loop as written (64 tensors of 16 KiB, 300 passes) with CUDA started
           inside it: where its buffers lie in their pages, the loop's time, each copy's median,
           the CPUs the main thread ran on, its transparent huge pages (the last of PASSES such
           loops, default 1)
  parts    programs.py's small_copies as gated.sh times it (CUDA started first), timed in parts:
           the tensors' making, the first pass, the 299 others without their checks, the
           first check, the other checks, the stack
Prints one JSON line."""
import collections, json, os, sys, time

import torch

FLOATS = 4096  # 16 KiB
clock = time.perf_counter_ns


def cpu():
    """The CPU this process's main thread runs on now (/proc's `processor` field)."""
    with open("/proc/thread-self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])


CPUS = collections.Counter()  # where the main thread was, sampled once a pass


def timed_pass(host):
    """Each buffer of `host` copied to the device once a pass, 300 passes: (total s, median ns
    a copy, the copies' checksum)."""
    each = []
    check = 0.0
    for step in range(300):
        CPUS[cpu()] += 1
        for h in host:
            t = clock()
            d = h.cuda()
            each.append(clock() - t)
            if step == 299:
                check += float(d[0].item())
    each.sort()
    return sum(each) / 1e9, each[len(each) // 2], check


def offsets():
    stride = FLOATS + 1024  # buffers 20 KiB apart, as separate heap blocks lie
    big = torch.arange(64 * stride + 2048, dtype=torch.float32)
    base = big.data_ptr()
    result = {}
    wanted = [0, 64, 512, 1024, 1552, 2048, 2272, 2480, 3072, 4032]
    for _ in range(3):
        for off in wanted:
            first = ((off - base) % 4096) // 4
            host = [big[first + i * stride: first + i * stride + FLOATS] for i in range(64)]
            assert all(h.data_ptr() % 4096 == off for h in host)
            total, median, check = timed_pass(host)
            want = sum(float(first + i * stride) for i in range(64))
            assert check == want, (check, want)
            result.setdefault(off, []).append(round(median))
    return {"median_ns_by_offset": {k: sorted(v)[1] for k, v in result.items()},
            "runs_ns": result}


def lay():
    torch.manual_seed(0)
    host = [torch.full((FLOATS,), float(i)) for i in range(64)]
    where = collections.Counter(h.data_ptr() % 4096 for h in host)
    for _ in range(int(os.environ.get("PASSES", "1"))):  # more, for a profile of the loop
        total, median, check = timed_pass(host)
        assert check == sum(range(64)), check
    return {"loop_s": total, "median_ns": median, "offsets": where.most_common(6),
            "first": hex(host[0].data_ptr()), "cpus": CPUS.most_common(4),
            "anon_huge_kb": huge_kb()}


def huge_kb():
    """The process's anonymous memory in transparent huge pages, in KiB."""
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1])
    return None


def parts():
    torch.cuda.init()
    torch.empty(1, device="cuda")
    torch.manual_seed(0)
    took = collections.Counter()
    began = t = clock()
    host = [torch.full((FLOATS,), float(i)) for i in range(64)]
    took["make"] += clock() - t
    last, mismatches = [], 0
    for step in range(300):
        part = "first_pass" if step == 0 else "passes"
        for i, h in enumerate(host):
            t = clock()
            d = h.cuda()
            took[part] += clock() - t
            if step == 299:
                last.append(d)
            if step % 50 == 0:
                t = clock()
                mismatches += int(d[0].item() != float(i))
                took["first_check" if step == 0 and i == 0 else "checks"] += clock() - t
    t = clock()
    result = torch.stack(last)
    torch.cuda.synchronize()
    took["stack"] += clock() - t
    whole = clock() - began
    assert mismatches == 0 and float(result[:, 0].sum()) == sum(range(64))
    return {"seconds": whole / 1e9, **{k: round(v / 1e6, 3) for k, v in took.items()}}


print(json.dumps({"offsets": offsets, "lay": lay, "parts": parts}[sys.argv[1]]()))
