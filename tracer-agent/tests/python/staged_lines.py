"""A Python program for the tracer's tests: three 8 MiB arrays put on the device 20 times each
through a framework (tests/python/site-packages/stager, standing for CuPy's `asarray`), which
copies each on the CPU into a pinned staging buffer of its own and copies that; each array
comes back and is checked. Its last line of stdout is its ground truth: the line that puts
the arrays, and the puts and bytes.
Usage: python3 staged_lines.py LIBCUDART"""
import ctypes
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "site-packages"))
import stager  # noqa: E402

SIZE, STEPS = 8 << 20, 20
cudart = ctypes.CDLL(sys.argv[1])


def address(buffer):
    return ctypes.addressof((ctypes.c_char * len(buffer)).from_buffer(buffer))


def main():
    framework = stager.Stager(cudart, SIZE)
    arrays = [bytearray(SIZE) for _ in range(3)]
    back = bytearray(SIZE)
    put_line = 0
    for step in range(STEPS):
        for i, array in enumerate(arrays):
            array[0] = (step + i) % 256
            framework.put(address(array), SIZE); put_line = sys._getframe().f_lineno
            framework.get(address(back), SIZE)
            if back[0] != array[0]:
                raise SystemExit("the device's copy came back wrong")
    print(json.dumps({
        "file": __file__, "line": put_line, "puts": STEPS * len(arrays),
        "bytes": STEPS * len(arrays) * SIZE,
    }))


main()
