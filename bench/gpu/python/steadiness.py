"""Is an allocation's Python site a steadier identity than its C++ call site? (#28)

Reads histories as JSON (`tracer export --format json`): what one run learned (A) and what
another run of the same program learned (B). For every allocation of B it looks up the same
identity in A, two ways:

- C++: (call site, ordinal at that call site, size), what the policy uses today;
- Python: (innermost Python frame, ordinal among the allocations of that frame, size).

An identity is *steady* for an allocation of B when A has it and the allocation found there
was copied as often (so a decision learned from A is right for it). Prints one JSON line per
way: allocations of B, found in A, steady, and the same for B's hot allocations (copied at
least twice), and which C++ call sites hold more than one Python line.
Usage: python3 steadiness.py A.json B.json"""
import collections
import json
import sys


def load(path):
    with open(path) as f:
        data = json.load(f)
    sites = data["call_sites"]
    callers = {alloc: ids for alloc, ids in data.get("callers", [])}
    host = [a for a in data["allocations"] if a["kind"] in ("pageable", "pinned", "registered")]
    host.sort(key=lambda a: a["id"])
    python_ordinals = collections.Counter()
    rows = []
    for a in host:
        site = sites[a["call_site"]] if a.get("call_site") is not None else None
        frames = [sites[i] for i in callers.get(a["id"], [])]
        py = next((f for f in frames if f["module"].startswith("python:")), None)
        py_key = (py["module"], py["offset"]) if py else None
        py_ordinal = python_ordinals[(a["pid"], py_key)]
        python_ordinals[(a["pid"], py_key)] += 1
        rows.append({
            "cpp": (site["module"], site["offset"], a["ordinal"], a["size"]) if site else None,
            "python": (py_key, py_ordinal, a["size"]) if py_key else None,
            "transfers": a["stats"]["transfers"],
            "cpp_site": (site["module"], site["offset"]) if site else None,
            "py_key": py_key,
        })
    return rows


def compare(a_rows, b_rows, way):
    known = {r[way]: r["transfers"] for r in a_rows if r[way] is not None}
    out = {"way": way, "allocations": len(b_rows), "found": 0, "steady": 0,
           "hot": 0, "hot_found": 0, "hot_steady": 0}
    for r in b_rows:
        hot = r["transfers"] >= 2
        out["hot"] += hot
        if r[way] in known:
            out["found"] += 1
            out["hot_found"] += hot
            if known[r[way]] == r["transfers"]:
                out["steady"] += 1
                out["hot_steady"] += hot
    return out


def main():
    a_rows, b_rows = load(sys.argv[1]), load(sys.argv[2])
    for way in ("cpp", "python"):
        print(json.dumps(compare(a_rows, b_rows, way)))
    lines_per_site = collections.defaultdict(set)
    for r in b_rows:
        if r["cpp_site"] and r["py_key"]:
            lines_per_site[r["cpp_site"]].add(r["py_key"])
    shared = {f"{m.rsplit('/', 1)[-1]}+{o:#x}": len(lines)
              for (m, o), lines in lines_per_site.items() if len(lines) > 1}
    print(json.dumps({"cpp_sites_with_several_python_lines": shared}))


if __name__ == "__main__":
    main()
