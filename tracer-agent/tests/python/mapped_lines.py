"""A Python program for the tracer's tests: its hot buffer is an anonymous mapping (a 32 MiB
bytearray, which malloc maps, as PyTorch's and NumPy's large CPU arrays are), made at a known
line and copied to the device and back 30 times through the CUDA runtime called with ctypes
(in the tests, the CUDA stand-in: a test fixture, not CUDA); a cold one (8 MiB) is copied
once. Its last line of stdout is its ground truth: each buffer's size, line and copies.
Usage: python3 mapped_lines.py LIBCUDART"""
import ctypes
import json
import sys

H2D, D2H = 1, 2
HOT, COLD = 32 << 20, 8 << 20
cudart = ctypes.CDLL(sys.argv[1])


def check(code):
    if code != 0:
        raise SystemExit(f"CUDA error {code}")


def address(buffer):
    return ctypes.addressof((ctypes.c_char * len(buffer)).from_buffer(buffer))


def copy(dst, src, size, direction):
    check(cudart.cudaMemcpy(ctypes.c_void_p(dst), ctypes.c_void_p(src), ctypes.c_size_t(size),
                            direction))


def main():
    device = ctypes.c_void_p()
    check(cudart.cudaMalloc(ctypes.byref(device), ctypes.c_size_t(HOT)))
    hot = bytearray(HOT); hot_line = sys._getframe().f_lineno
    cold = bytearray(COLD); cold_line = sys._getframe().f_lineno
    for step in range(30):
        hot[0] = step
        copy(device.value, address(hot), HOT, H2D)
        copy(address(hot), device.value, HOT, D2H)
        if hot[0] != step:
            raise SystemExit("the device's copy came back wrong")
    copy(device.value, address(cold), COLD, H2D)
    check(cudart.cudaFree(device))
    print(json.dumps({
        "file": __file__,
        "hot": {"line": hot_line, "size": HOT, "transfers": 60},
        "cold": {"line": cold_line, "size": COLD, "transfers": 1},
    }))


main()
