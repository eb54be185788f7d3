"""Summarises bench/gpu/leases/run.sh's OUT: medians per configuration, the budget check over
every sample, and the kill test. Usage: python3 summarize.py OUT"""
import json
import statistics
import sys

out = sys.argv[1]
runs = [json.loads(l) for l in open(f"{out}/runs.jsonl") if l.strip()]
print("| config | dense s | sparse s | sum s | pair wall s | mismatches | dense peak MiB | sparse peak MiB |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for config in ["plain", "leases", "share", "unlimited"]:
    rows = [r for r in runs if r["config"] == config]
    rounds = sorted({r["round"] for r in rows})
    dense, sparse, total, wall, peak_d, peak_s = [], [], [], [], [], []
    bad = sum(r.get("mismatches", 1) for r in rows) + sum(r["status"] != 0 for r in rows)
    for rnd in rounds:
        pair = {r["role"]: r for r in rows if r["round"] == rnd}
        if "dense" not in pair or "sparse" not in pair or "seconds" not in pair["dense"] or "seconds" not in pair["sparse"]:
            continue
        dense.append(pair["dense"]["seconds"])
        sparse.append(pair["sparse"]["seconds"])
        total.append(pair["dense"]["seconds"] + pair["sparse"]["seconds"])
        wall.append(max(p["ended"] for p in pair.values()) - min(p["started"] for p in pair.values()))
        peak = lambda r: r.get("peak_pinned_bytes") or r.get("peak_promoted_bytes") or 0
        peak_d.append(peak(pair["dense"]) / 2**20)
        peak_s.append(peak(pair["sparse"]) / 2**20)
    med = lambda v: f"{statistics.median(v):.2f}" if v else "-"
    print(f"| {config} | {med(dense)} | {med(sparse)} | {med(total)} | {med(wall)} | {bad} | {med(peak_d)} | {med(peak_s)} |")
rows = [l.split("\t") for l in open(f"{out}/samples.tsv").read().splitlines()[1:]]
num = lambda s: float(s) if s.strip() else 0.0
for phase in ["leases", "share", "unlimited", "kill"]:
    sel = [r for r in rows if r[1] == phase]
    if sel:
        print(f"\nphase {phase}: {len(sel)} samples; node_pinned max {max(num(r[2]) for r in sel) / 2**20:.0f} MiB, "
              f"leased max {max(num(r[3]) for r in sel) / 2**20:.0f} MiB; /proc VmPin max {max(num(r[5]) for r in sel) / 1024:.0f} MiB, "
              f"RssShmem max {max(num(r[6]) for r in sel) / 1024:.0f} MiB, VmLck max {max(num(r[7]) for r in sel) / 1024:.0f} MiB")
leases = [r for r in runs if r["config"] == "leases"]
for r in leases:
    l = r.get("leases") or {}
    print(f"\nleases round {r['round']} {r['role']}: granted {l.get('granted')} denied {l.get('denied')} "
          f"reclaims {l.get('reclaims')} given back {l.get('given_back')} peak leased {(l.get('peak_leased_bytes') or 0) / 2**20:.0f} MiB; "
          f"kept without lease {r.get('kept_without_lease')}")
try:
    print("\nkill:", open(f"{out}/kill.json").read().strip())
except OSError:
    print("\nkill: none")
