"""Compares a tracer history (JSON) with a program's own count of its copies (the last JSON
line it printed: h2d, d2h and, where given, h2d_bytes, d2h_bytes); prints one JSON line."""
import json
import sys

history = json.load(open(sys.argv[1]))
truth = json.loads([l for l in open(sys.argv[2]) if l.startswith("{")][-1])
stats = history["stats"]
traced = {
    "h2d": sum(a["stats"]["h2d_count"] for a in history["allocations"] + history.get("compacted", [])),
    "d2h": sum(a["stats"]["d2h_count"] for a in history["allocations"] + history.get("compacted", [])),
    "h2d_bytes": stats["h2d_bytes"],
    "d2h_bytes": stats["d2h_bytes"],
}
lost = stats["kernel"]["ringbuf_full"] + stats["kernel"].get("host_ringbuf_full", 0) + stats["decode_errors"]
exact = all(traced[k] == truth[k] for k in traced if k in truth) and lost == 0
print(json.dumps({"program": sys.argv[3], "exact": exact, "lost": lost, "traced": traced,
                  "truth": {k: truth[k] for k in traced if k in truth},
                  "calls": stats["calls"], "nested": stats["nested_calls"]}))
