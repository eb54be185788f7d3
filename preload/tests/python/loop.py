"""A Python program on the CUDA stand-in (a test fixture, not CUDA) through ctypes, no hotpin
code, shaped like a PyTorch training loop (#40): 3 hot 8 MiB inputs copied to the device every
step, 12 cold 8 MiB buffers copied once each, and a fresh 8 MiB result per step, copied into
from the device and checked, then let go. Every block comes from the same C call site (a
bytearray) at a Python line of its own. Prints one JSON line: checks, mismatches.
Usage: python3 loop.py LIBCUDART"""
import ctypes
import json

from standin import D2H, H2D, MIB, address, cudart

STEPS = 40
SIZE = 8 * MIB


def make_hot():
    return bytearray(SIZE)  # MARK: hot


def make_cold():
    return bytearray(SIZE)  # MARK: cold


def make_result():
    return bytearray(SIZE)  # MARK: result


def copy(dst, src, kind):
    assert cudart.cudaMemcpy(dst, src, SIZE, kind) == 0


def main():
    device = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(device), SIZE) == 0
    hot = [make_hot() for _ in range(3)]
    cold = [make_cold() for _ in range(12)]
    checks = mismatches = 0
    for i, block in enumerate(cold):
        block[0] = i
        copy(device, ctypes.c_void_p(address(block)), H2D)
    for step in range(STEPS):
        for k, block in enumerate(hot):
            block[0], block[-1] = step % 251, k
            copy(device, ctypes.c_void_p(address(block)), H2D)
        result = make_result()
        copy(ctypes.c_void_p(address(result)), device, D2H)
        checks += 1
        mismatches += int(result != hot[-1])
        del result
    print(json.dumps({"checks": checks, "mismatches": mismatches}))


main()
