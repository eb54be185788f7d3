"""One run's line for a benchmark's JSONL file: the program's own JSON line (the last line of
PREFIX.out; if there is none, the error and the tail of PREFIX.err), the configuration and the
round, and the named counters of the interposer's report (PREFIX.<pid>.json).
Usage: python3 collect.py PREFIX CONFIG ROUND COUNTER...   (prints the line)"""
import glob
import json
import sys

prefix, config, round_, *keys = sys.argv[1:]
try:
    line = json.loads(open(prefix + ".out").read().strip().splitlines()[-1])
except Exception as e:
    line = {"error": repr(e), "stderr": open(prefix + ".err").read()[-2000:]}
line.update(config=config, round=int(round_))
for path in glob.glob(prefix + ".*.json"):
    counters = json.load(open(path))["counters"]
    for key in keys:
        line[key] = counters.get(key)
print(json.dumps(line))
