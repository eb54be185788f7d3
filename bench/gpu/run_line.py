"""One run of a bench/gpu driver (transparency/run.sh, online/run.sh) as one JSON line: the
program's own last JSON line (or an error with the tail of its stdout), the run's program,
configuration, round, exit status and wall seconds, any EXTRA fields, the tail of its stderr
after a failure (an exit status not 0, an error, errors or mismatches), and the interposer's
counters summed over the run's report files PREFIX.<pid>.json (peaks, the longest wait and
the budget, which every process has alike: the largest).
Usage: python3 run_line.py PROGRAM CONFIG ROUND EXIT STDOUT STDERR PREFIX SECONDS [EXTRA-JSON]
(PREFIX empty for a run without hotpin)."""
import glob
import json
import sys

program, config, rnd, rc, stdout, stderr, prefix, elapsed = sys.argv[1:9]
extra = json.loads(sys.argv[9]) if len(sys.argv) > 9 else {}
text = open(stdout, errors="replace").read()
d = None
for line in reversed(text.splitlines()):
    if line.startswith("{"):
        try:
            d = json.loads(line)
        except ValueError:
            pass
        break
if d is None:
    d = {"error": "no JSON line", "stdout_tail": text[-400:]}
d.update(extra)
d.update(program=program, config=config, round=int(rnd), exit=int(rc), elapsed=float(elapsed))
if int(rc) != 0 or "error" in d or d.get("errors") or d.get("mismatches"):
    d["stderr_tail"] = open(stderr, errors="replace").read()[-2000:]
reports = sorted(glob.glob(prefix + ".*.json")) if prefix else []
if reports:
    counters = {}
    for path in reports:
        try:
            r = json.load(open(path))
        except ValueError:
            continue
        for k, v in r.get("counters", {}).items():
            if isinstance(v, (int, float)):
                largest = k.startswith("peak") or k in ("budget", "longest_register_ns")
                counters[k] = max(counters.get(k, 0), v) if largest \
                    else counters.get(k, 0) + v
    d["counters"] = counters
    d["reports"] = len(reports)
print(json.dumps(d))
