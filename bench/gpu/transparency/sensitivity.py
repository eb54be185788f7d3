"""Sensitivity test of the checks (no hotpin): runs torch_checks.py or cupy_checks.py with
every large host buffer the program makes through torch.empty / numpy.empty registered
(cudaHostRegister) behind its back, as an interposer without its fixes would, and never
freed (so freed-memory reuse is not exercised here). The checks that depend on pageable
semantics must then report mismatches; plain runs must not.
Usage: python3 sensitivity.py torch_checks|cupy_checks [steps]"""
import os
import runpy
import sys

program = sys.argv[1]
sys.argv = [program + ".py"] + sys.argv[2:]
here = os.path.dirname(os.path.abspath(__file__))
kept = []  # registered buffers, kept alive (never unregistered)
FLOOR = 1 << 20

if program == "torch_checks":
    import torch

    empty = torch.empty

    def pinned_empty(*args, **kwargs):
        t = empty(*args, **kwargs)
        if t.device.type == "cpu" and not kwargs.get("pin_memory") and \
                t.numel() * t.element_size() >= FLOOR:
            torch.cuda.init()
            torch.cuda.cudart().cudaHostRegister(t.data_ptr(), t.numel() * t.element_size(), 0)
            kept.append(t)
        return t

    torch.empty = pinned_empty
elif program == "cupy_checks":
    import cupy
    import numpy

    empty = numpy.empty

    def pinned_empty(*args, **kwargs):
        a = empty(*args, **kwargs)
        if a.nbytes >= FLOOR:
            try:
                cupy.cuda.runtime.hostRegister(a.ctypes.data, a.nbytes, 0)
                kept.append(a)
            except Exception as e:  # noqa: BLE001
                print(f"sensitivity: hostRegister: {e}", file=sys.stderr)
        return a

    numpy.empty = pinned_empty
else:
    sys.exit(f"sensitivity: no such program {program}")

runpy.run_path(os.path.join(here, program + ".py"), run_name="__main__")
