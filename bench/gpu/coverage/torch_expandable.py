"""PyTorch copies with the caching allocator's expandable segments (device memory mapped with
cuMemCreate/cuMemMap instead of cudaMalloc). Set-up: pageable and pinned CPU tensors and CUDA
tensors of three sizes, a large CUDA tensor whose slice is copied into, and 8 threads' own
tensors and streams. Measured: `dst.copy_(src)` only, between those preallocated tensors:
pageable host-to-device and device-to-host (blocking), pinned ones with non_blocking=True, and
the 8 threads doing the same on their own streams. Nothing else that copies (no printing of
tensors, no .item()).
Usage: python3 torch_expandable.py [iterations]   (default 10; each thread does 5)"""
import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import sys  # noqa: E402
import threading  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from coverage_common import Tally, print_truth, wait_for_go  # noqa: E402

import torch  # noqa: E402

K = int(sys.argv[1]) if len(sys.argv) > 1 else 10
THREADS = 8
KT = 5
SIZES = [64 << 10, 1 << 20, 5 << 20]      # bytes per tensor (float32)
THREAD_BYTES = 1 << 20
BIG_BYTES = 96 << 20                      # grows the expandable segment
SLICE_OFFSET = (40 << 20) // 4            # elements

# ---- set-up: every allocation, no copies
if not torch.cuda.is_available():
    sys.exit("torch_expandable: CUDA is not available")
dev = torch.device("cuda", 0)
sets = []
for n in SIZES:
    numel = n // 4
    sets.append({
        "bytes": n,
        "pageable": torch.empty(numel).fill_(1.0),
        "pinned": torch.empty(numel, pin_memory=True).fill_(2.0),
        "device": torch.empty(numel, device=dev),
    })
big = torch.empty(BIG_BYTES // 4, device=dev)
slice_src = sets[1]["pinned"]
big_slice = big[SLICE_OFFSET:SLICE_OFFSET + slice_src.numel()]
workers = []
for t in range(THREADS):
    numel = THREAD_BYTES // 4
    workers.append({
        "stream": torch.cuda.Stream(device=dev),
        "pageable": torch.empty(numel).fill_(float(t)),
        "pinned": torch.empty(numel, pin_memory=True).fill_(float(t)),
        "device": torch.empty(numel, device=dev),
        "tally": Tally(),
        "error": None,
    })
torch.cuda.synchronize()

wait_for_go()

# ---- measured phase
tally = Tally()
for _ in range(K):
    for s in sets:
        d, pg, pn, n = s["device"], s["pageable"], s["pinned"], s["bytes"]
        d.copy_(pg)
        tally.add("copy_pageable_h2d", "h2d", n)
        d.copy_(pn, non_blocking=True)
        tally.add("copy_pinned_h2d", "h2d", n)
        pg.copy_(d)
        tally.add("copy_pageable_d2h", "d2h", n)
        pn.copy_(d, non_blocking=True)
        tally.add("copy_pinned_d2h", "d2h", n)
    big_slice.copy_(slice_src, non_blocking=True)
    tally.add("copy_pinned_into_slice_h2d", "h2d", SIZES[1])
    slice_src.copy_(big_slice, non_blocking=True)
    tally.add("copy_slice_to_pinned_d2h", "d2h", SIZES[1])
torch.cuda.synchronize()


def work(w):
    try:
        with torch.cuda.stream(w["stream"]):
            for _ in range(KT):
                w["device"].copy_(w["pageable"])
                w["tally"].add("thread_copy_pageable_h2d", "h2d", THREAD_BYTES)
                w["device"].copy_(w["pinned"], non_blocking=True)
                w["tally"].add("thread_copy_pinned_h2d", "h2d", THREAD_BYTES)
                w["pageable"].copy_(w["device"])
                w["tally"].add("thread_copy_pageable_d2h", "d2h", THREAD_BYTES)
                w["pinned"].copy_(w["device"], non_blocking=True)
                w["tally"].add("thread_copy_pinned_d2h", "d2h", THREAD_BYTES)
            w["stream"].synchronize()
    except Exception as e:  # reported below, after join
        w["error"] = repr(e)


threads = [threading.Thread(target=work, args=(w,)) for w in workers]
for t in threads:
    t.start()
for t in threads:
    t.join()
torch.cuda.synchronize()
errors = [w["error"] for w in workers if w["error"]]
if errors:
    sys.exit(f"torch_expandable: thread failed: {errors[0]}")
for w in workers:
    tally.merge(w["tally"])

expandable = None
try:
    expandable = any(seg.get("is_expandable", False) for seg in torch.cuda.memory_snapshot())
except Exception:
    pass
print_truth("torch_expandable", tally, setup=Tally(), torch=torch.__version__,
            cuda=torch.version.cuda, expandable_segments=expandable, threads=THREADS)
