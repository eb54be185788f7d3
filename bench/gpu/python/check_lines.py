"""Checks a tracer history's Python lines against a program's ground truth (torch_lines.py):
every allocation the program made is in the history, of its size (the first of that size and
kind), and its Python callers begin with the program's line and function, then its caller's.
Prints one JSON line; exits 1 where any is missing or wrong.
Usage: python3 check_lines.py HISTORY.json TRUTH.json MODE"""
import json
import sys

history = json.load(open(sys.argv[1]))
truth = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
sites = history["call_sites"]
callers = {alloc: sites for alloc, sites in history.get("callers", [])}


def python_lines(allocation):
    out = []
    for site in callers.get(allocation["id"], []):
        s = sites[site]
        if s["module"].startswith("python:"):
            out.append((s["module"][len("python:"):], s["offset"], s.get("symbol")))
    return out


kinds = {"pinned": "pinned", "pageable": "pageable"}
found, wrong = 0, []
for made in truth["allocations"]:
    want = [(made["file"], made["line"], made["function"]),
            (made["file"], made["caller_line"], made["caller"])]
    candidates = [a for a in history["allocations"]
                  if a["kind"] == kinds[made["kind"]] and a["size"] >= made["size"]
                  and a["size"] < 2 * made["size"]]
    lines = [python_lines(a)[:2] for a in candidates]
    if want in lines:
        found += 1
    else:
        wrong.append({"made": made, "lines": lines[:3]})
result = {"mode": sys.argv[3], "allocations": len(truth["allocations"]), "named": found,
          "ok": not wrong, "wrong": wrong[:3]}
print(json.dumps(result))
sys.exit(0 if not wrong else 1)
