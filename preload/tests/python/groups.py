"""A Python program on the CUDA stand-in (a test fixture, not CUDA) through ctypes, no hotpin
code. Every step makes two 8 MiB blocks of the same size through the same C call site (a
bytearray): a result in make_result(), which a copy from the device fills and which is
checked, and a scratch block in make_scratch(), written and never copied; both are let go at
the end of the step. Prints one JSON line: checks, mismatches.
Usage: python3 groups.py LIBCUDART"""
import ctypes
import json

from standin import D2H, H2D, MIB, address, cudart

STEPS = 30


def make_result(size):
    return bytearray(size)  # MARK: result


def make_scratch(size):
    return bytearray(size)  # MARK: scratch


def main():
    device = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(device), 8 * MIB) == 0
    source = bytearray(8 * MIB)
    checks = mismatches = 0
    for step in range(STEPS):
        source[0] = source[-1] = step
        assert cudart.cudaMemcpy(device, ctypes.c_void_p(address(source)), 8 * MIB, H2D) == 0
        result = make_result(8 * MIB)
        assert cudart.cudaMemcpy(ctypes.c_void_p(address(result)), device, 8 * MIB, D2H) == 0
        scratch = make_scratch(8 * MIB)
        scratch[0] = step
        checks += 1
        mismatches += int(result != source)
        del result, scratch
    print(json.dumps({"checks": checks, "mismatches": mismatches}))


main()
