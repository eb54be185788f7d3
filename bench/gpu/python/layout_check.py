"""Checks, with no hotpin, that the interpreter's structures are where preload/src/python.rs
reads them: from this thread's state, the current frame's code object is this function's,
the previous frame's is its caller's, and the code object's qualified name reads back.
Prints one JSON line; exits 1 where they are not (then hotpin must not read this Python).
Usage: python3 layout_check.py"""
import ctypes
import json
import sys

LAYOUTS = {
    (3, 11): dict(tstate_cframe=56, cframe_current=8, frame_code=32, frame_previous=48,
                  frame_prev_instr=56, code_qualname=128, code_adaptive=184, ascii_data=48),
    (3, 12): dict(tstate_cframe=56, cframe_current=0, frame_code=0, frame_previous=8,
                  frame_prev_instr=56, code_qualname=128, code_adaptive=192, ascii_data=40),
}
version = sys.version_info[:2]
layout = LAYOUTS.get(version)
api = ctypes.pythonapi
api.PyGILState_GetThisThreadState.restype = ctypes.c_void_p
api.PyCode_Addr2Line.argtypes = [ctypes.py_object, ctypes.c_int]
api.PyCode_Addr2Line.restype = ctypes.c_int


def innermost():
    # Read inline: a call to a Python helper here would push a frame of its own.
    l, u64 = layout, ctypes.c_uint64.from_address
    tstate = api.PyGILState_GetThisThreadState()
    frame = u64(u64(tstate + l["tstate_cframe"]).value + l["cframe_current"]).value
    code = u64(frame + l["frame_code"]).value
    caller = u64(u64(frame + l["frame_previous"]).value + l["frame_code"]).value
    name = ctypes.string_at(u64(code + l["code_qualname"]).value + l["ascii_data"], 9).decode()
    # The instruction the frame is at, and the line that is, read on one line.
    prev, here = u64(frame + l["frame_prev_instr"]).value, sys._getframe().f_lineno
    offset = prev - (code + l["code_adaptive"])
    line = api.PyCode_Addr2Line(sys._getframe().f_code, offset)
    return {
        "line": line == here,
        "code": code == id(sys._getframe().f_code),
        "caller": caller == id(sys._getframe(1).f_code),
        "qualname": name,
    }


def outer():
    return innermost()


result = {"python": sys.version.split()[0], "layout": layout is not None}
if layout is not None:
    result.update(outer())
ok = (result.get("code") and result.get("caller") and result.get("line")
      and result.get("qualname") == "innermost")
result["ok"] = bool(ok)
print(json.dumps(result))
sys.exit(0 if ok else 1)
