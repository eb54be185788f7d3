"""Finds, by their values in this live interpreter, where CPython keeps each field that
hotpin reads to name an allocation's Python lines (tracer-common/src/python.rs, `Layout`),
and prints them as one JSON line: {"python": "3.12.3", "fields": {"name": [offsets...]}}.
Every read goes through /proc/self/mem, so a wrong guess reads an error, never a crash.
No hotpin is involved. `cargo test -p tracer-agent python` compares the 3.11 table with it on
the build machine; run it with the GPU machine's Python to check 3.12.
Usage: python3 layout_check.py"""
import ctypes
import json
import os
import sys
import threading

api = ctypes.pythonapi
for name in ["PyInterpreterState_Head", "PyInterpreterState_ThreadHead",
             "PyThreadState_Next", "PyGILState_GetThisThreadState"]:
    getattr(api, name).restype = ctypes.c_void_p
api.PyInterpreterState_ThreadHead.argtypes = [ctypes.c_void_p]
api.PyThreadState_Next.argtypes = [ctypes.c_void_p]
api.PyCode_Addr2Line.argtypes = [ctypes.py_object, ctypes.c_int]
api.PyCode_Addr2Line.restype = ctypes.c_int
MEM = os.open("/proc/self/mem", os.O_RDONLY)


def read(address, size):
    try:
        return os.pread(MEM, size, address)
    except (OSError, OverflowError):
        return None


def u64(address):
    raw = read(address, 8)
    return int.from_bytes(raw, "little") if raw and len(raw) == 8 else None


def offsets(base, span, wanted, step=8, size=8):
    """The offsets in [0, span) at which `base` holds `wanted`."""
    found = []
    for offset in range(0, span, step):
        raw = read(base + offset, size)
        if raw is not None and len(raw) == size and int.from_bytes(raw, "little", signed=size == 4) == wanted:
            found.append(offset)
    return found


fields = {}
runtime = ctypes.addressof(ctypes.c_char.in_dll(api, "_PyRuntime"))
interp = api.PyInterpreterState_Head()
fields["runtime_interp_head"] = offsets(runtime, 4096, interp)
fields["interp_threads_head"] = offsets(interp, 8192, api.PyInterpreterState_ThreadHead(interp))
started, done = threading.Event(), threading.Event()
worker = threading.Thread(target=lambda: (started.set(), done.wait()))
worker.start()
started.wait()
head = api.PyInterpreterState_ThreadHead(interp)
fields["tstate_next"] = offsets(head, 256, api.PyThreadState_Next(head))
done.set()
worker.join()
tstate = api.PyGILState_GetThisThreadState()
fields["tstate_native_thread_id"] = offsets(tstate, 1024, threading.get_native_id())


def never_called(a, b):
    c = a + b
    d = [c * i for i in range(a)]
    return sum(d) - c


code = never_called.__code__
raw = code.co_code


def same_opcodes(at):
    """Whether memory at `at` holds `raw`'s instructions: the first (RESUME) and most others.
    At creation 3.12 fills the inline caches (code units of opcode 0) and fuses some pairs
    (two LOAD_FASTs into one superinstruction)."""
    mem = read(at, len(raw))
    if mem is None or mem[:2] != raw[:2]:
        return False
    units = [i for i in range(0, len(raw), 2) if raw[i]]
    return sum(mem[i] == raw[i] for i in units) * 10 >= len(units) * 7


fields["code_adaptive"] = [o for o in range(24, 512, 8) if same_opcodes(id(code) + o)]
fields["code_firstlineno"] = offsets(id(code), 256, code.co_firstlineno, step=4, size=4)
fields["code_filename"] = offsets(id(code), 256, id(code.co_filename))
fields["code_linetable"] = offsets(id(code), 256, id(code.co_linetable))
fields["bytes_data"] = [o for o in range(16, 64, 8)
                       if read(id(code.co_linetable) + o, len(code.co_linetable)) == code.co_linetable]
text = "an_ascii_name"
fields["ascii_data"] = [o for o in range(16, 96, 8) if read(id(text) + o, len(text)) == text.encode()]
fields["ascii_length"] = offsets(id(text), 48, len(text))
fields["ascii_state"] = [o for o in range(16, 48, 4)
                        if (int.from_bytes(read(id(text) + o, 4), "little") >> 5) & 3 == 3]


def walk():
    """Every field of the frame chain, found from inside `read` (the innermost Python frame
    while /proc/self/mem is read), called at one depth from here so its frame is at one
    address: tstate_cframe, cframe_current and frame_code lead from this thread's state to
    `read`'s code; frame_previous from there to `u64`'s; frame_prev_instr is an instruction of
    `read` on the line that reads."""
    inner, outer = read.__code__, u64.__code__
    line = inner.co_firstlineno + 2  # `return os.pread(...)`
    # (tstate_cframe, cframe_current, frame_code, frame): through a _PyCFrame (3.11, 3.12), or
    # straight from the thread state (3.13: cframe_current is None).
    chains = []
    for a in range(0, 256, 8):
        pointer = u64(tstate + a)
        if not pointer:
            continue
        for c in range(0, 64, 8):
            if u64(pointer + c) == id(inner):
                chains.append((a, None, c, pointer))
        for b in range(0, 32, 8):
            frame = u64(pointer + b)
            if not frame:
                continue
            for c in range(0, 64, 8):
                if u64(frame + c) == id(inner):
                    chains.append((a, b, c, frame))
    previous, prev_instr = set(), set()
    for _, _, c, frame in chains:
        for d in range(0, 96, 8):
            up = u64(frame + d)
            if up and u64(up + c) == id(outer):
                previous.add(d)
        for adaptive in fields["code_adaptive"]:
            first = id(inner) + adaptive
            for e in range(0, 96, 8):
                value = u64(frame + e)
                if value is not None and first <= value < first + len(inner.co_code):
                    if api.PyCode_Addr2Line(inner, value - first) == line:
                        prev_instr.add(e)
    fields["tstate_cframe"] = sorted({a for a, _, _, _ in chains})
    fields["cframe_current"] = sorted({b for _, b, _, _ in chains}, key=lambda b: -1 if b is None else b)
    fields["frame_code"] = sorted({c for _, _, c, _ in chains})
    fields["frame_previous"] = sorted(previous)
    fields["frame_prev_instr"] = sorted(prev_instr)


def nested():
    def inner():
        return inner.__code__
    return inner()


walk()
fields["code_qualname"] = offsets(id(nested()), 256, id(nested().co_qualname))
print(json.dumps({"python": sys.version.split()[0], "fields": fields}))
