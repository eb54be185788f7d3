"""Medians of the cannot-help runs: per program, seconds as written, first run and from
history, the ratios to as written, and whether every run checked out."""
import collections, json, statistics, sys

runs = collections.defaultdict(list)
bad = collections.Counter()
for line in open(sys.argv[1]):
    d = json.loads(line)
    if d.get("config") == "learn":
        continue
    if d.get("exit") != 0 or d.get("mismatches", 1) != 0:
        bad[(d["program"], d["config"])] += 1
        continue
    runs[(d["program"], d["config"])].append(d["seconds"])
print("| program | as written (median, range) | first run | x | from history | x | failed runs |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for p in dict.fromkeys(k[0] for k in runs):
    def cell(c):
        s = runs.get((p, c), [])
        return (statistics.median(s), f"{statistics.median(s):.3f} ({min(s):.3f}-{max(s):.3f})") if s else (None, "-")
    (pm, pc), (fm, fc), (hm, hc) = cell("plain"), cell("auto-first"), cell("auto-history")
    ratio = lambda m: f"{m / pm:.3f}" if m and pm else "-"
    failed = sum(bad[(p, c)] for c in ("plain", "auto-first", "auto-history"))
    print(f"| {p} | {pc} | {fc} | {ratio(fm)} | {hc} | {ratio(hm)} | {failed} |")
