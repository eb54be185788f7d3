"""Python lines on real PyTorch, for the tracer (#28): after its set-up (and its gate, as the
coverage programs: HOTPIN_GO), it makes tensors from known lines of its own, pinned ones
(`pin_memory=True`, the caching host allocator's cudaHostAlloc: sizes of a power of two, each
size new to the cache) and pageable ones (`torch.empty`, malloc: seen with --libc-malloc),
copies each to the GPU and back, and prints its ground truth as its last stdout line: each
allocation's kind, size, file, line and function with its caller's, and the copies by
direction. Usage: python3 torch_lines.py"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "coverage"))
from coverage_common import wait_for_go  # noqa: E402

import torch  # noqa: E402

made = []
copies = {"h2d": 0, "d2h": 0, "h2d_bytes": 0, "d2h_bytes": 0}


def note(kind, size, line):
    caller = sys._getframe(2)
    made.append({"kind": kind, "size": size, "file": __file__, "line": line,
                 "function": sys._getframe(1).f_code.co_qualname,
                 "caller_line": caller.f_lineno, "caller": caller.f_code.co_qualname})


def staging_buffer(size):
    t = torch.empty(size // 4, pin_memory=True); note("pinned", size, sys._getframe().f_lineno)
    return t


def host_batch(size):
    t = torch.empty(size // 4); note("pageable", size, sys._getframe().f_lineno)
    return t


class Step:
    def run(self, device, size):
        pinned = staging_buffer(size)
        pageable = host_batch(size)
        for host in (pinned, pageable):
            device.copy_(host)
            host.copy_(device)
            copies["h2d"] += 1
            copies["d2h"] += 1
            copies["h2d_bytes"] += size
            copies["d2h_bytes"] += size
        return pinned, pageable


def main():
    dev = torch.device("cuda", 0)
    devices = {size: torch.empty(size // 4, device=dev) for size in (4 << 20, 8 << 20, 16 << 20)}
    torch.cuda.synchronize()
    wait_for_go()
    kept = [Step().run(devices[size], size) for size in sorted(devices)]
    torch.cuda.synchronize()
    print(json.dumps({"allocations": made, **copies, "kept": len(kept)}))


main()
