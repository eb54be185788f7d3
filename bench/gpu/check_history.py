"""Compares a tracer history (JSON) with what a program said it did; prints one JSON line."""
import json
import sys

history = json.load(open(sys.argv[1]))
expected = json.loads(sys.argv[2])
stats = history["stats"]
n = expected["bytes_per_copy"]
h2d = sum(a["stats"]["h2d_count"] for a in history["allocations"] + history.get("compacted", []))
d2h = sum(a["stats"]["d2h_count"] for a in history["allocations"] + history.get("compacted", []))
pinned = [a for a in history["allocations"] if a["kind"] in ("pinned", "registered")]
result = {
    "program": sys.argv[3],
    "expected_h2d": expected["h2d"], "traced_h2d": h2d,
    "expected_d2h": expected["d2h"], "traced_d2h": d2h,
    "expected_bytes": (expected["h2d"] + expected["d2h"]) * n,
    "traced_bytes": stats["h2d_bytes"] + stats["d2h_bytes"],
    "calls": stats["calls"], "nested": stats["nested_calls"], "failed": stats["failed_calls"],
    "lost": stats["kernel"]["ringbuf_full"] + stats["kernel"].get("host_ringbuf_full", 0)
            + stats["decode_errors"],
    "untracked_transfers": stats["untracked_transfers"],
    "transfers_by_kind": {k: sum(a["stats"]["transfers"] for a in history["allocations"] if a["kind"] == k)
                          for k in sorted({a["kind"] for a in history["allocations"]})},
    "host_memory_calls": stats.get("host_memory_calls", {}),
    "page_faults": stats.get("page_faults", 0),
    "untracked_page_faults": stats.get("untracked_page_faults", 0),
    "nvidia_ioctls": sum(stats.get("nvidia_ioctls", {}).values()),
    "pinned_allocations": len(pinned),
    "pinned_transfers_max": max([a["stats"]["transfers"] for a in pinned] or [0]),
    "calls_by_function": stats["calls_by_function"],
}
result["exact"] = (result["expected_h2d"] == h2d and result["expected_d2h"] == d2h
                   and result["expected_bytes"] == result["traced_bytes"] and result["lost"] == 0)
print(json.dumps(result))
