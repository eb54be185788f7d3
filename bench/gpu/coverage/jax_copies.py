"""JAX copies. Assumes XLA's default preallocation (XLA_PYTHON_CLIENT_PREALLOCATE left true; the
fraction is set to 0.25 unless given): the device memory that the measured phase's new buffers
come from is then reserved at start-up, before the gate. Set-up: float32 NumPy arrays of three
sizes; per size one jax.device_put (the base array) and one more device_put plus one
np.asarray as warm-ups of both transfer paths (these set-up copies are listed under "setup" in
the truth; a recording from the first instruction sees them, and whatever XLA copies by itself
at start-up, too); then K distinct device arrays per size computed on the device by negation
(a unary op: no constants to upload), so that each measured np.asarray reads an array whose
host value JAX has not cached yet. Measured: K x jax.device_put(np_array).block_until_ready()
(host-to-device) and K x np.asarray(device_array) (device-to-host) per size.
Usage: python3 jax_copies.py [iterations]   (default 5)"""
import os
import sys

os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.25")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from coverage_common import Tally, print_truth, wait_for_go  # noqa: E402

import numpy as np  # noqa: E402
import jax  # noqa: E402

K = int(sys.argv[1]) if len(sys.argv) > 1 else 5
SIZES = [64 << 10, 1 << 20, 4 << 20]      # bytes per array (float32)

# ---- set-up
try:
    gpu = jax.devices("gpu")[0]
except RuntimeError as e:
    sys.exit(f"jax_copies: no GPU backend: {e}")
setup = Tally()
hosts, d2h_sources = [], []
for i, n in enumerate(SIZES):
    h = np.full(n // 4, float(i) + 1.0, dtype=np.float32)
    hosts.append(h)
    base = jax.device_put(h, gpu)
    setup.add("device_put_base_h2d", "h2d", n)
    warm = jax.device_put(h, gpu).block_until_ready()
    setup.add("device_put_warmup_h2d", "h2d", n)
    np.asarray(warm)
    setup.add("asarray_warmup_d2h", "d2h", n)
    del warm
    chain = [base]
    for _ in range(K):
        chain.append(-chain[-1])
    srcs = chain[1:]
    for a in srcs:
        a.block_until_ready()
    d2h_sources.append(srcs)

wait_for_go()

# ---- measured phase
tally = Tally()
for _ in range(K):
    for h, n in zip(hosts, SIZES):
        jax.device_put(h, gpu).block_until_ready()
        tally.add("device_put_h2d", "h2d", n)
outs = []
for srcs, n in zip(d2h_sources, SIZES):
    for a in srcs:
        outs.append(np.asarray(a))
        tally.add("asarray_d2h", "d2h", n)

print_truth("jax_copies", tally, setup=setup, jax=jax.__version__,
            backend=gpu.platform, device_kind=getattr(gpu, "device_kind", None),
            setup_note="XLA may make further copies of its own at start-up")
