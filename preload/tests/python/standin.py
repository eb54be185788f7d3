"""What the Python test programs share: the CUDA stand-in (a test fixture, not CUDA) loaded
through ctypes from the path given first on the command line, and a buffer's address."""
import ctypes
import sys

MIB = 1 << 20
H2D, D2H = 1, 2
cudart = ctypes.CDLL(sys.argv[1])


def address(buffer):
    return ctypes.addressof((ctypes.c_char * len(buffer)).from_buffer(buffer))
