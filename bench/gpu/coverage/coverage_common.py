"""Shared by the Python coverage programs: the pause between set-up and the measured phase, and
the tally of copies that becomes the ground truth printed as the last stdout line."""
import json
import os
import sys
import time


def wait_for_go():
    """When HOTPIN_GO names a file, say "READY <pid>" on stderr and wait (10 ms polls, at most
    120 s) until that file exists; otherwise return at once."""
    go = os.environ.get("HOTPIN_GO")
    if not go:
        return
    sys.stderr.write(f"READY {os.getpid()}\n")
    sys.stderr.flush()
    deadline = time.monotonic() + 120.0
    while time.monotonic() < deadline:
        if os.path.exists(go):
            return
        time.sleep(0.01)
    sys.stderr.write(f"gate: {go} did not appear within 120 s\n")
    sys.exit(3)


class Tally:
    """Counts operations by kind; each kind has one direction: h2d, d2h or d2d."""

    def __init__(self):
        self.kinds = {}

    def add(self, name, direction, nbytes, times=1):
        k = self.kinds.setdefault(name, {"dir": direction, "count": 0, "bytes": 0})
        assert k["dir"] == direction, name
        k["count"] += times
        k["bytes"] += nbytes * times

    def merge(self, other):
        for name, k in other.kinds.items():
            self.add(name, k["dir"], 0, 0)
            self.kinds[name]["count"] += k["count"]
            self.kinds[name]["bytes"] += k["bytes"]

    def totals(self):
        out = {}
        for d in ("h2d", "d2h"):
            out[d] = sum(k["count"] for k in self.kinds.values() if k["dir"] == d)
            out[d + "_bytes"] = sum(k["bytes"] for k in self.kinds.values() if k["dir"] == d)
        return out


def print_truth(program, measured, setup=None, **extra):
    """The ground truth: the measured phase's totals, `setup` (copies made before the gate,
    which a recording from the first instruction also sees), by_kind, and `extra`."""
    truth = {"program": program, **measured.totals()}
    if setup is not None:
        truth["setup"] = setup.totals()
        truth["setup_by_kind"] = {n: k["count"] for n, k in setup.kinds.items()}
    truth["by_kind"] = {n: k["count"] for n, k in measured.kinds.items()}
    truth["by_kind_bytes"] = {n: k["bytes"] for n, k in measured.kinds.items()}
    truth.update(extra)
    sys.stdout.flush()
    print(json.dumps(truth), flush=True)
