"""Paired ratios of the cannot-help runs pooled over several calls (#40 item 1): each hotpin
run against the as-written run of its own round in its own file, the rounds of every file
together, per program and configuration: how many, their median, and its 90% interval (2000
bootstrap resamples of the rounds, seeded, so the same files give the same table). A run that
failed or computed anything different from as written is left out and counted; a round
without its as-written run is left out.
Usage: python3 pool.py FILE.jsonl [FILE.jsonl ...]"""
import collections, json, random, statistics, sys

if len(sys.argv) < 2:
    sys.exit(__doc__)
ratios = collections.defaultdict(list)
bad = collections.Counter()
for path in sys.argv[1:]:
    rounds = collections.defaultdict(dict)
    for line in open(path):
        d = json.loads(line)
        if d.get("config") in ("learn", "auto-learn", "reference"):
            continue
        if d.get("exit") != 0 or d.get("mismatches", 1) != 0:
            bad[(d["program"], d["config"])] += 1
            continue
        rounds[(d["program"], d["round"])][d["config"]] = d["seconds"]
    for (program, _), configs in rounds.items():
        plain = configs.get("plain")
        if not plain:
            continue
        for config, seconds in configs.items():
            if config != "plain":
                ratios[(program, config)].append(seconds / plain)

random.seed(1)
print(f"pooled over {len(sys.argv) - 1} files")
print("| program | config | rounds | paired x, median (90% interval) | within 1.02x? | failed or wrong runs |")
print("| --- | --- | --- | --- | --- | --- |")
for (program, config), xs in sorted(ratios.items()):
    meds = sorted(statistics.median(random.choices(xs, k=len(xs))) for _ in range(2000))
    low, high = meds[100], meds[1899]
    verdict = "met" if high <= 1.02 else "missed" if low > 1.02 else "not shown"
    print(f"| {program} | {config} | {len(xs)} | {statistics.median(xs):.3f} ({low:.3f}-{high:.3f}) | {verdict} | {bad[(program, config)]} |")
