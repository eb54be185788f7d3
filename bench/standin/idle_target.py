"""A traced program that does nothing for a while with a large memory map, for what the
tracer's agent takes from an idle target: it loads the CUDA runtime given (the stand-in's: a
test fixture, not CUDA), maps 3,000 pages of a file and 3,000 anonymous pages, alternately (so
that none merge: 6,000 lines in /proc/PID/maps, as a PyTorch process has thousands), then
sleeps. Usage: python3 idle_target.py LIBCUDART SECONDS"""
import ctypes
import mmap
import os
import sys
import tempfile
import time

cudart = ctypes.CDLL(sys.argv[1])
with tempfile.NamedTemporaryFile() as backing:
    backing.write(b"\0" * 8192)
    backing.flush()
    maps = []
    for i in range(3000):
        maps.append(mmap.mmap(backing.fileno(), 4096, prot=mmap.PROT_READ, offset=4096 * (i % 2)))
        maps.append(mmap.mmap(-1, 4096))
    time.sleep(float(sys.argv[2]))
