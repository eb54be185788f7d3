"""The table of bench/gpu/transparency/run.sh's transparency.jsonl: per program and
configuration, the runs, those that crashed (exit status not 0), checks and mismatches in
all, the median time, and whether the answers the program observed (pinned or not, error
codes) and its copies are those of its plain runs; then mismatches per check.
Usage: python3 summarize.py transparency.jsonl"""
import json
import statistics
import sys
from collections import defaultdict

ORDER = ["plain", "use", "pin-all", "profile", "pin-none"]

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
by = defaultdict(list)
for r in rows:
    by[(r["program"], r["config"])].append(r)
programs = list(dict.fromkeys(r["program"] for r in rows))
configs = sorted({r["config"] for r in rows},
                 key=lambda c: (ORDER.index(c) if c in ORDER else len(ORDER), c))


def total(rs, i):
    return sum(v[i] for r in rs for v in r.get("checks", {}).values())


def median(values):
    values = [v for v in values if v is not None]
    return f"{statistics.median(values):.2f}" if values else "-"


def reference(rs, key):
    """The plain runs' common value of `key`, or None where they differ among themselves."""
    values = [json.dumps(r.get(key), sort_keys=True) for r in rs if r.get("exit") == 0]
    if not values:
        return None, "no plain run"
    if len(set(values)) > 1:
        return None, "plain runs differ"
    return json.loads(values[0]), ""


# Answers a framework on hotpin's list of callers told the truth (docs/transparency.md,
# "Frameworks that ask before they copy") may get: "host" (1) for memory hotpin pinned.
# What the program itself is told (the same keys + "_program") must stay as plain.
TOLD_TRUTH = {"cupy_checks": {"asarray_src_memory_type", "set_src_memory_type",
                              "get_out_memory_type", "numpy_fresh_memory_type"}}


def as_plain(program, got, ref):
    """`got` with the answers its framework may be told truthfully put back to plain's."""
    if not isinstance(got, dict) or not isinstance(ref, dict):
        return got
    allowed = TOLD_TRUTH.get(program, set())
    return {k: (ref.get(k) if k in allowed and v == 1 else v) for k, v in got.items()}


def compare(rs, ref, why, key, program=None):
    if ref is None:
        return why or "-"
    printed = [r for r in rs if "error" not in r]  # runs that printed their JSON line
    if not printed:
        return "no JSON line"
    differing = [r for r in printed if as_plain(program, r.get(key), ref) != ref]
    if not differing:
        return "same" if len(printed) == len(rs) else f"same in {len(printed)}/{len(rs)}"
    if not isinstance(ref, dict):
        return f"DIFFERENT in {len(differing)}/{len(printed)}"
    keys = set()
    for r in differing:
        got = r.get(key) or {}
        keys |= {k for k in set(ref) | set(got) if ref.get(k) != got.get(k)}
    shown = "; ".join(
        f"{k}: {json.dumps(ref.get(k))} -> "
        f"{', '.join(sorted({json.dumps((x.get(key) or {}).get(k)) for x in differing}))}"
        for k in sorted(keys))
    return f"DIFFERENT in {len(differing)}/{len(printed)} ({shown})"


print("| program | config | runs | crashed | checks | mismatches | median s (checks) | "
      "median s (wall) | observed = plain | copies = plain |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for p in programs:
    plain = by.get((p, "plain"), [])
    ref_obs, why_obs = reference(plain, "observed")
    ref_copies, why_copies = reference(plain, "copies")
    for c in configs:
        rs = by.get((p, c))
        if not rs:
            continue
        crashed = [r for r in rs if r.get("exit") != 0]
        print(f"| {p} | {c} | {len(rs)} | {len(crashed) or '-'} | {total(rs, 0)} | "
              f"{total(rs, 1)} | {median(r.get('seconds') for r in rs)} | "
              f"{median(r.get('elapsed') for r in rs)} | "
              f"{'plain' if c == 'plain' and ref_obs is not None else compare(rs, ref_obs, why_obs, 'observed', p)} | "
              f"{'plain' if c == 'plain' and ref_copies is not None else compare(rs, ref_copies, why_copies, 'copies')} |")

print()
print("Mismatches per check (mismatches/checks, all runs of the configuration):")
print()
for p in programs:
    names = list(dict.fromkeys(n for c in configs for r in by.get((p, c), [])
                               for n in r.get("checks", {})))
    shown = [c for c in configs if by.get((p, c))]
    print(f"| {p} | " + " | ".join(shown) + " |")
    print("| --- |" + " --- |" * len(shown))
    for n in names:
        cells = []
        for c in shown:
            rs = by[(p, c)]
            k = sum(r.get("checks", {}).get(n, [0, 0])[0] for r in rs)
            m = sum(r.get("checks", {}).get(n, [0, 0])[1] for r in rs)
            cells.append(f"**{m}/{k}**" if m else f"0/{k}")
        print(f"| {n} | " + " | ".join(cells) + " |")
    print()

problems = [r for r in rows if r.get("exit") != 0 or r.get("errors") or "error" in r]
if problems:
    print("Crashes and checks that raised:")
    print()
    for r in problems:
        what = r.get("errors") or r.get("error") or ""
        tail = (r.get("stderr_tail") or "").strip().splitlines()[-3:]
        print(f"- {r['program']} {r['config']} round {r['round']}: exit {r.get('exit')} "
              f"{json.dumps(what)[:300]} | {' / '.join(tail)[:400]}")
    print()

counters = ["promoted", "cache_hits", "demoted", "kept_pinned", "skipped_registers",
            "pinned_on_demand", "copies_waited", "captures_refused", "questions_hidden"]
if not any("counters" in r for r in rows):
    sys.exit(0)
print("Interposer counters (median over runs, summed over each run's processes):")
print()
print("| program | config | " + " | ".join(counters) + " |")
print("| --- | --- |" + " --- |" * len(counters))
for p in programs:
    for c in configs:
        rs = [r for r in by.get((p, c), []) if "counters" in r]
        if not rs:
            continue
        cells = [median(r["counters"].get(k) for r in rs).removesuffix(".00") for k in counters]
        print(f"| {p} | {c} | " + " | ".join(cells) + " |")
