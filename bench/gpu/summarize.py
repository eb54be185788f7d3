"""Medians per (size, config) from bench.jsonl, as a Markdown table and a PNG plot."""
import json
import statistics as st
import sys
from collections import defaultdict

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
png = sys.argv[2] if len(sys.argv) > 2 else None
by = defaultdict(list)
for r in rows:
    by[(r["size"], r["config"])].append(r)
configs = ["unpinned", "pinned", "profile", "use"]
sizes = sorted({r["size"] for r in rows})
med = lambda key, rs: st.median(r[key] for r in rs)
print("| size | runs | unpinned (s) | pinned (s) | profile (s) | use (s) | use / pinned | unpinned / use | profile / pinned | use: pinned share |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
table = {}
for size in sizes:
    t = {c: med("total_s", by[(size, c)]) for c in configs if by[(size, c)]}
    share = med("bytes_pinned", by[(size, "use")]) / by[(size, "use")][0]["bytes_allocated"]
    table[size] = (t, share)
    print(f"| {size >> 20} MiB | {len(by[(size, 'use')])} | {t['unpinned']:.4f} | {t['pinned']:.4f} | "
          f"{t['profile']:.4f} | {t['use']:.4f} | {t['use'] / t['pinned']:.3f} | "
          f"{t['unpinned'] / t['use']:.2f} | {t['profile'] / t['pinned']:.3f} | {100 * share:.1f}% |")
if png:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for c in configs:
        a.plot([s >> 20 for s in sizes], [table[s][0][c] for s in sizes], marker="o", label=c)
    a.set_xscale("log", base=2); a.set_yscale("log"); a.set_xlabel("buffer size (MiB)")
    a.set_ylabel("total time, median (s)"); a.set_title("runtime per configuration"); a.legend()
    b.bar([str(s >> 20) for s in sizes], [100 * table[s][1] for s in sizes])
    b.set_xlabel("buffer size (MiB)"); b.set_ylabel("% of allocated bytes pinned"); b.set_title("use mode: share pinned")
    fig.tight_layout(); fig.savefig(png, dpi=110)
