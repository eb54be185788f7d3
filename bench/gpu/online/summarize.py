"""The tables of bench/gpu/online/run.sh's online.jsonl, and the online-decision targets.

Per program, one row per configuration: runs, median seconds (the program's own `seconds`,
runs that exited 0 and printed their line), every run's seconds, plain / config (the plain
median over this one's), median wall seconds, median pinned bytes, mismatches/checks over all
runs, crashed runs (exit status not 0, or no JSON line) and skipped ones. Pinned bytes: for
by-hand the program's `pinned_by_hand_bytes`; for plain what the program itself asks pinned
(`pinned_requested_bytes`, marked "asked"; PyTorch may round it up); for hotpin's
configurations the interposer's `peak_pinned_bytes` if the counters have it, else
`peak_promoted_bytes + kept_pinned_bytes` (marked "~").

Then per program the targets, on medians, each PASS, FAIL or n/a (a configuration missing).
A target also FAILs when a configuration it names had a mismatch or a crashed run: a speed-up
with a wrong result is no speed-up.
  best = min(pin-all, by-hand) time
  auto-first:   time <= 1.15 x best; pinned < pin-all's pinned
  auto-history: time <= 1.05 x best; time <= auto-first's time
  budget:       time <= 1.15 x auto-first's time; in every run, what hotpin itself held
                pinned (peak_pinned_bytes less the pinned requests kept; or
                peak_promoted_bytes) <= the budget it was given (budget_bytes), and the
                report's `budget`, if any, is that budget
  over_pinned:  auto-first, auto-profile and use: pinned <= 1.5 x by-hand's pinned, time <= 1.1 x by-hand's
Usage: python3 summarize.py online.jsonl [more.jsonl ...]   (several: read as one)"""
import json
import statistics
import sys
from collections import defaultdict

ORDER = ["plain", "by-hand", "pin-all", "auto-first", "auto-history", "auto-history-at-birth",
         "auto-history-ahead", "auto-profile", "use", "budget", "profile", "auto-learn",
         "pin-none"]
HOTPIN = {"pin-all", "auto-first", "auto-history", "auto-history-at-birth", "auto-history-ahead",
          "auto-profile", "use", "budget", "profile", "auto-learn", "pin-none"}
MIB = 1 << 20


def load(path):
    rows = []
    for n, line in enumerate(open(path), 1):
        line = line.strip()
        if not line:
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            print(f"{path}:{n}: not JSON, left out", file=sys.stderr)
    return rows


def counts(r):
    """(checks, mismatches) of one run: ints, or transparency's {name: [checks, mismatches]}."""
    checks = r.get("checks")
    if isinstance(checks, dict):
        return sum(v[0] for v in checks.values()), sum(v[1] for v in checks.values())
    return int(checks or 0), int(r.get("mismatches") or 0)


def crashed(r):
    return r.get("exit", 0) != 0 or "error" in r or "seconds" not in r


def pinned(r):
    """(bytes, how) of one run, or (None, '')."""
    if r["config"] == "by-hand":
        v = r.get("pinned_by_hand_bytes")
        return (v, "") if v is not None else (None, "")
    if r["config"] == "plain":
        v = r.get("pinned_requested_bytes")
        return (v, "asked") if v is not None else (None, "")
    c = r.get("counters")
    if not c:
        return None, ""
    if "peak_pinned_bytes" in c:
        return c["peak_pinned_bytes"], ""
    return c.get("peak_promoted_bytes", 0) + c.get("kept_pinned_bytes", 0), "~"


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


class Config:
    def __init__(self, rows):
        self.rows = [r for r in rows if "skipped" not in r]
        self.skipped = [r for r in rows if "skipped" in r]
        self.good = [r for r in self.rows if not crashed(r)]
        self.crashed = [r for r in self.rows if crashed(r)]
        self.seconds = median(r.get("seconds") for r in self.good)
        self.elapsed = median(r.get("elapsed") for r in self.rows)
        printed = [r for r in self.rows if "error" not in r]
        self.checks = sum(counts(r)[0] for r in printed)
        self.mismatches = sum(counts(r)[1] for r in printed)
        got = [pinned(r) for r in self.good]
        self.pinned = median(v for v, _ in got)
        self.pinned_how = next((how for v, how in got if v is not None), "")

    def wrong(self):
        """Why this configuration's results cannot be trusted, or ''."""
        why = []
        if self.mismatches:
            why.append(f"{self.mismatches} mismatches")
        if self.crashed:
            why.append(f"{len(self.crashed)} crashed")
        return ", ".join(why)


def fmt_s(v):
    return "-" if v is None else f"{v:.3f}"


def fmt_b(v, how=""):
    if v is None:
        return "-"
    text = f"{v / MIB:.0f} MiB"
    return {"asked": f"{text} (asked)", "~": f"~{text}"}.get(how, text)


def table(program, configs):
    print(f"### {program}\n")
    print("| config | runs | median s | runs (s) | plain / config | median wall s | "
          "median pinned | mismatches/checks | crashed | skipped |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    plain = configs.get("plain")
    for name, c in configs.items():
        speedup = "-"
        if plain and plain.seconds and c.seconds:
            speedup = f"{plain.seconds / c.seconds:.2f}x"
        runs = ", ".join(fmt_s(r.get("seconds")) if not crashed(r) else "crash"
                         for r in sorted(c.rows, key=lambda r: r.get("round", 0)))
        print(f"| {name} | {len(c.rows)} | {fmt_s(c.seconds)} | {runs or '-'} | {speedup} | "
              f"{fmt_s(c.elapsed)} | {fmt_b(c.pinned, c.pinned_how)} | "
              f"{c.mismatches}/{c.checks} | {len(c.crashed) or '-'} | "
              f"{len(c.skipped) or '-'} |")
    print()


def targets(program, configs):
    """[(target, detail, verdict)] for one program."""
    out = []

    def get(name):
        c = configs.get(name)
        return c if c and c.good else None

    def check(target, names, ok, detail):
        missing = [n for n in names if get(n) is None]
        if missing:
            out.append((target, f"no successful {', '.join(missing)} run", "n/a"))
            return
        wrong = [f"{n}: {configs[n].wrong()}" for n in names if configs[n].wrong()]
        if wrong:
            out.append((target, detail() + "; " + "; ".join(wrong), "FAIL"))
            return
        out.append((target, detail(), "PASS" if ok() else "FAIL"))

    def best():
        times = [get(n).seconds for n in ("pin-all", "by-hand") if get(n)]
        return min(times) if times else None

    def best_names():
        return [n for n in ("pin-all", "by-hand") if get(n)] or ["pin-all", "by-hand"]

    b = best()
    check("auto-first time <= 1.15 x min(pin-all, by-hand)", ["auto-first"] + best_names(),
          lambda: get("auto-first").seconds <= 1.15 * b,
          lambda: f"{get('auto-first').seconds:.3f} s vs 1.15 x {b:.3f} s = {1.15 * b:.3f} s")
    check("auto-first pinned < pin-all pinned", ["auto-first", "pin-all"],
          lambda: get("auto-first").pinned is not None and get("pin-all").pinned is not None
          and get("auto-first").pinned < get("pin-all").pinned,
          lambda: f"{fmt_b(get('auto-first').pinned)} vs {fmt_b(get('pin-all').pinned)}")
    check("auto-history time <= 1.05 x min(pin-all, by-hand)", ["auto-history"] + best_names(),
          lambda: get("auto-history").seconds <= 1.05 * b,
          lambda: f"{get('auto-history').seconds:.3f} s vs 1.05 x {b:.3f} s = {1.05 * b:.3f} s")
    check("auto-history time <= auto-first time", ["auto-history", "auto-first"],
          lambda: get("auto-history").seconds <= get("auto-first").seconds,
          lambda: f"{get('auto-history').seconds:.3f} s vs {get('auto-first').seconds:.3f} s")
    check("budget time <= 1.15 x auto-first time", ["budget", "auto-first"],
          lambda: get("budget").seconds <= 1.15 * get("auto-first").seconds,
          lambda: f"{get('budget').seconds:.3f} s vs 1.15 x {get('auto-first').seconds:.3f} s"
                  f" = {1.15 * get('auto-first').seconds:.3f} s")

    def own_pins(r):
        """What hotpin itself held pinned at its peak, at least: peak_pinned_bytes less the
        program's pinned requests kept (a total, so this never overstates), or, from an
        interposer without peak_pinned_bytes, peak_promoted_bytes."""
        c = r.get("counters") or {}
        if "peak_pinned_bytes" in c:
            return max(0, c["peak_pinned_bytes"] - c.get("kept_pinned_bytes", 0))
        return c.get("peak_promoted_bytes", 0)

    def over_budget():
        return [r for r in get("budget").good
                if r.get("budget_bytes") is None or own_pins(r) > r["budget_bytes"]
                or (r.get("counters") or {}).get("budget", r["budget_bytes"])
                != r["budget_bytes"]]

    def budget_detail(r):
        c = r.get("counters") or {}
        applied = c.get("budget")
        return (f"round {r.get('round')}: {fmt_b(own_pins(r))} of {fmt_b(r.get('budget_bytes'))}"
                + (f" (the interposer kept to {fmt_b(applied)})"
                   if applied is not None and applied != r.get("budget_bytes") else ""))

    check("budget: hotpin's own pins <= the budget, every run", ["budget"],
          lambda: not over_budget(),
          lambda: ", ".join(budget_detail(r) for r in get("budget").good))
    if program == "over_pinned":
        for name in ("auto-first", "auto-profile", "use"):
            check(f"over_pinned: {name} pinned <= 1.5 x by-hand pinned", [name, "by-hand"],
                  lambda name=name: get(name).pinned is not None
                  and get(name).pinned <= 1.5 * get("by-hand").pinned,
                  lambda name=name: f"{fmt_b(get(name).pinned)} vs 1.5 x "
                                    f"{fmt_b(get('by-hand').pinned)} = "
                                    f"{fmt_b(1.5 * get('by-hand').pinned)}")
            check(f"over_pinned: {name} time <= 1.1 x by-hand time", [name, "by-hand"],
                  lambda name=name: get(name).seconds <= 1.1 * get("by-hand").seconds,
                  lambda name=name: f"{get(name).seconds:.3f} s vs 1.1 x "
                                    f"{get('by-hand').seconds:.3f} s = "
                                    f"{1.1 * get('by-hand').seconds:.3f} s")
    wrong = [f"{n}: {c.wrong()}" for n, c in configs.items() if c.wrong()]
    out.append(("every configuration: 0 mismatches, 0 crashed",
                "; ".join(wrong) or "all runs checked out",
                "FAIL" if wrong else "PASS"))
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = [r for path in sys.argv[1:] for r in load(path)]
    programs = list(dict.fromkeys(r.get("program", "?") for r in rows))
    tally = defaultdict(int)
    verdicts = []
    for p in programs:
        by = defaultdict(list)
        for r in rows:
            if r.get("program", "?") == p:
                by[r.get("config", "?")].append(r)
        names = sorted(by, key=lambda c: (ORDER.index(c) if c in ORDER else len(ORDER), c))
        configs = {n: Config(by[n]) for n in names}
        table(p, configs)
        print(f"Targets, {p}:\n")
        print("| target | measured | verdict |")
        print("| --- | --- | --- |")
        for target, detail, verdict in targets(p, configs):
            print(f"| {target} | {detail} | {verdict} |")
            tally[verdict] += 1
            verdicts.append((p, target, verdict))
        print()
    print(f"Targets: {tally['PASS']} PASS, {tally['FAIL']} FAIL, {tally['n/a']} n/a")
    for p, target, verdict in verdicts:
        if verdict == "FAIL":
            print(f"- FAIL {p}: {target}")


if __name__ == "__main__":
    main()
