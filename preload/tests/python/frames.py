"""A Python program on the CUDA stand-in (a test fixture, not CUDA) through ctypes, no hotpin
code: a hot 8 MiB batch made in make_batch() and copied there and back 20 times, every copy
checked; a cold 4 MiB one made in make_cold() and copied once. Prints one JSON line: checks,
mismatches, and the line numbers that made each (for the test to compare).
Usage: python3 frames.py LIBCUDART"""
import ctypes
import json

from standin import D2H, H2D, MIB, address, cudart


def make_batch(size):
    return bytearray(size)  # MARK: hot


def make_cold(size):
    return bytearray(size)  # MARK: cold


def main():
    device = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(device), 8 * MIB) == 0
    batch = make_batch(8 * MIB)
    cold = make_cold(4 * MIB)
    back = bytearray(8 * MIB)
    checks = mismatches = 0
    assert cudart.cudaMemcpy(device, ctypes.c_void_p(address(cold)), 4 * MIB, H2D) == 0
    for step in range(20):
        batch[0] = batch[-1] = step
        assert cudart.cudaMemcpy(device, ctypes.c_void_p(address(batch)), 8 * MIB, H2D) == 0
        assert cudart.cudaMemcpy(ctypes.c_void_p(address(back)), device, 8 * MIB, D2H) == 0
        checks += 1
        mismatches += int(back != batch)
    print(json.dumps({"checks": checks, "mismatches": mismatches}))


main()
