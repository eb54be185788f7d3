"""PyTorch CPU tensors in memory from hotpin's allocator, through its C ABI (ctypes).

    import hotpin_torch                      # loads libhotpin.so (HOTPIN_LIB, or next to it)
    batch = hotpin_torch.empty((B, D), torch.float32)
    batch.copy_(source)                      # fill it on the CPU as usual
    x = batch.cuda()                         # fast when hotpin pinned it

The mode and history come from the environment, read at the first allocation: HOTPIN_MODE
(pin-none, pin-all, profile, use), HOTPIN_HISTORY, HOTPIN_PINNED_BUDGET, HOTPIN_CUDART.
Memory goes back to hotpin when the last tensor viewing it is gone. hotpin reuses a freed
pinned block for the next allocation of its size at once, so a buffer must not be dropped
while an asynchronous copy (non_blocking=True) from it may still run: synchronise first.

Every allocation made here has one call site (inside libffi, which ctypes calls through);
hotpin tells them apart by their order and size, and recognises a buffer allocated afresh
each step by its size (a recycled group).
"""
import ctypes
import os

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
_lib = ctypes.CDLL(os.environ.get("HOTPIN_LIB", os.path.join(_HERE, "libhotpin.so")))
_lib.hotpin_malloc.restype = ctypes.c_void_p
_lib.hotpin_malloc.argtypes = [ctypes.c_size_t]
_lib.hotpin_free.restype = ctypes.c_int
_lib.hotpin_free.argtypes = [ctypes.c_void_p]


class Stats(ctypes.Structure):
    """struct hotpin_stats (include/hotpin.h)."""
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "allocations", "frees", "pinned_bytes", "pageable_bytes", "peak_pinned_bytes",
        "pinned_allocations", "pageable_allocations", "cache_hits", "cached_bytes",
        "fallback_budget", "fallback_pin_failed", "fallback_no_cuda", "fallback_pressure",
        "double_frees", "foreign_frees", "pin_time_ns")]


_lib.hotpin_stats.restype = ctypes.c_int
_lib.hotpin_stats.argtypes = [ctypes.POINTER(Stats)]
_buffer_types = {}


def _buffer_type(nbytes):
    """A ctypes byte array type that gives its memory back to hotpin when collected."""
    kind = _buffer_types.get(nbytes)
    if kind is None:
        def __del__(self):
            _lib.hotpin_free(ctypes.addressof(self))
        kind = type(f"HotpinBuffer{nbytes}", (ctypes.c_ubyte * nbytes,), {"__del__": __del__})
        _buffer_types[nbytes] = kind
    return kind


def empty(shape, dtype=torch.float32):
    """An uninitialised CPU tensor of `shape` in hotpin memory (pinned or not, as hotpin
    decides)."""
    count = 1
    for n in shape:
        count *= n
    nbytes = max(1, count * torch.empty((), dtype=dtype).element_size())
    ptr = _lib.hotpin_malloc(nbytes)
    if not ptr:
        raise MemoryError(f"hotpin_malloc({nbytes}) failed")
    buffer = _buffer_type(nbytes).from_address(ptr)
    # The tensor's storage keeps `buffer` alive; its __del__ frees the memory.
    return torch.frombuffer(buffer, dtype=dtype, count=count).view(shape)


def stats():
    """hotpin's counters (pinned bytes now and at peak, fallbacks, ...) as a dict."""
    out = Stats()
    if _lib.hotpin_stats(ctypes.byref(out)) != 0:
        raise RuntimeError("hotpin_stats failed")
    return {name: getattr(out, name) for name, _ in Stats._fields_}
