"""hotpin: pin, while a CUDA program runs, the host memory its copies make worth pinning.

The work is done by the `hotpin` and `tracer` programs this package installs on PATH, with the
interposer `libhotpin_preload.so` beside them; `python -m hotpin ...` runs `hotpin ...`.
"""
import os
import shutil
import sys
import sysconfig


def executable(name="hotpin"):
    """The path of an installed hotpin program (`hotpin` or `tracer`)."""
    for folder in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        path = os.path.join(folder, name)
        if os.access(path, os.X_OK):
            return path
    found = shutil.which(name)
    if found:
        return found
    raise FileNotFoundError(f"hotpin: the {name} program is not installed beside this Python")
