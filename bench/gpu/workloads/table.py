"""The workloads' table (markdown, on stdout) and summary (JSON, for the chart) from the
JSONL lines of bench/gpu/online/run.sh: per workload and configuration the median `seconds`
and its range, the median peak of pinned bytes (a column for each option configuration the
runs have: at birth, at first copy, ahead), results checked and wrong, and the targets:
never slower than as written; from history within 1.1x of by hand; first run within 1.5x.
A run is read as bench/gpu/online/summarize.py reads it (its `Config`: crashed runs, checks,
pinned bytes: hotpin's `peak_pinned_bytes`, by hand what the program says it pins).
Usage: table.py ONLINE.jsonl [SUMMARY.json] (several JSONL files: join them with cat first)"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "online"))
from summarize import Config, load  # noqa: E402

CONFIGS = [("plain", "as written"), ("by-hand", "by hand"), ("auto-first", "hotpin, first run"),
           ("auto-history", "hotpin, from history"), ("budget", "hotpin, budget = by-hand bytes")]
# Configurations that weigh an option against the default: a column where the runs have them.
OPTIONS = [("auto-history-at-birth", "hotpin, from history, at birth"),
           ("auto-history-first-copy", "hotpin, from history, at first copy (HOTPIN_AHEAD=0)"),
           ("auto-history-ahead", "hotpin, from history, ahead (HOTPIN_AHEAD=1)")]
rows = load(sys.argv[1])
CONFIGS += [(c, name) for c, name in OPTIONS if any(r["config"] == c for r in rows)]
order = []
for r in rows:
    if r["program"] not in order:
        order.append(r["program"])


def size(b):
    return "-" if not b else (f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.0f} MiB")


summary = []
print("| workload | " + " | ".join(name for _, name in CONFIGS) + " | results | targets |")
print("| --- " * (len(CONFIGS) + 3) + "|")
for p in order:
    cells, med, pins, bad, checked, failed = [], {}, {}, 0, 0, 0
    for c, _ in CONFIGS:
        config = Config([r for r in rows if r["program"] == p and r["config"] == c])
        failed += len(config.crashed)
        bad += config.mismatches
        checked += config.checks
        if not config.good:
            cells.append("-" if not config.rows else f"failed ({len(config.rows)} runs)")
            continue
        s = sorted(r["seconds"] for r in config.good)
        med[c] = config.seconds
        pins[c] = config.pinned or 0
        cell = f"{med[c]:.2f} s ({s[0]:.2f}-{s[-1]:.2f})"
        if c != "plain":
            cell += f", {size(pins[c])}"
        cells.append(cell)
    targets = []
    plain, hand = med.get("plain"), med.get("by-hand")
    slower = [c for c, _ in CONFIGS
              if c not in ("plain", "by-hand") and plain and c in med and med[c] > plain * 1.02]
    targets.append("slower than as written: " + ", ".join(slower) if slower
                   else "never slower than as written")
    for c, limit, name in (("auto-history", 1.1, "from history"),
                           ("auto-history-ahead", 1.1, "from history ahead"),
                           ("auto-history-first-copy", 1.1, "from history at first copy"),
                           ("auto-first", 1.5, "first run")):
        if hand and c in med:
            x = med[c] / hand
            targets.append(f"{name} {x:.2f}x by hand ({'met' if x <= limit else f'over {limit}x'})")
    results = f"{bad} wrong of {checked} checked" + (f", {failed} runs failed" if failed else "")
    print(f"| {p} | " + " | ".join(cells) + f" | {results} | {'; '.join(targets)} |")
    summary.append({"workload": p, "seconds": med, "pinned_bytes": pins,
                    "wrong": bad, "checked": checked, "failed": failed})
if len(sys.argv) > 2:
    json.dump(summary, open(sys.argv[2], "w"), indent=1)
