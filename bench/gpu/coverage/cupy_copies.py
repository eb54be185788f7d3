"""CuPy copies. Set-up: NumPy arrays (pageable), pinned host arrays from cupyx.empty_pinned
(CuPy's pinned memory pool), and device arrays from CuPy's memory pool, three sizes. Measured:
`dev.set(host)` (host-to-device) and `dev.get(out=host)` (device-to-host) from and into both
pageable and pinned memory, and `cp.asarray(host)`, which copies a pageable source into a
staging buffer from the pinned memory pool first (a host-side copy, not counted) and then
host-to-device, and a pinned source directly. Set-up runs one cp.asarray of each kind and size
so that the pools hold the blocks the measured phase reuses; those copies are listed under
"setup" in the truth (a recording from the first instruction sees them too).
Usage: python3 cupy_copies.py [iterations]   (default 10)"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from coverage_common import Tally, print_truth, wait_for_go  # noqa: E402

import numpy as np  # noqa: E402
import cupy as cp  # noqa: E402
import cupyx  # noqa: E402

K = int(sys.argv[1]) if len(sys.argv) > 1 else 10
SIZES = [64 << 10, 1 << 20, 6 << 20]      # bytes per array (float32)

# ---- set-up: every allocation; the only copies are the listed warm-ups
setup = Tally()
cp.cuda.Device(0).use()
sets = []
for i, n in enumerate(SIZES):
    numel = n // 4
    pageable = np.full(numel, float(i), dtype=np.float32)
    pinned = cupyx.empty_pinned((numel,), dtype=np.float32)
    pinned[:] = float(i) + 0.5
    sets.append({"bytes": n, "pageable": pageable, "pinned": pinned,
                 "device": cp.empty(numel, dtype=cp.float32)})
stream = cp.cuda.get_current_stream()
for s in sets:
    # warm-ups: fill the device pool's and the pinned pool's caches with blocks of these sizes
    a = cp.asarray(s["pageable"])
    setup.add("asarray_pageable_h2d", "h2d", s["bytes"])
    b = cp.asarray(s["pinned"])
    setup.add("asarray_pinned_h2d", "h2d", s["bytes"])
    stream.synchronize()
    del a, b
cp.cuda.Device(0).synchronize()

wait_for_go()

# ---- measured phase
tally = Tally()
for _ in range(K):
    for s in sets:
        d, pg, pn, n = s["device"], s["pageable"], s["pinned"], s["bytes"]
        d.set(pg)
        tally.add("set_pageable_h2d", "h2d", n)
        d.set(pn)
        tally.add("set_pinned_h2d", "h2d", n)
        d.get(out=pg)
        tally.add("get_pageable_d2h", "d2h", n)
        d.get(out=pn)
        tally.add("get_pinned_d2h", "d2h", n)
        a = cp.asarray(pg)
        tally.add("asarray_pageable_h2d", "h2d", n)
        b = cp.asarray(pn)
        tally.add("asarray_pinned_h2d", "h2d", n)
        stream.synchronize()
        del a, b
cp.cuda.Device(0).synchronize()

print_truth("cupy_copies", tally, setup=setup, cupy=cp.__version__,
            cuda_runtime=cp.cuda.runtime.runtimeGetVersion())
