"""CI's check of gated.py (`cargo xtask test` runs it; no GPU, no PyTorch): the six workloads'
one-call harness must let no run's timed part overlap another's, run them in the interleaved
order (reversed in even rounds), hold every check until the group's timed parts are done (the reference's first),
start a group of rounds only once the group before it was checked (GROUP_ROUNDS=1 here), give
`hotpin run` the budget of the bytes the program pins by hand, check every result against the
reference, and record a run that fails, hangs in its timed part or never reaches its start
gate, without holding up the others or leaving a process behind.

It runs gated.py over two stand-in workloads (a stand-in `torch` of a few functions, written
to a temporary folder: common.py needs no more) under the real `hotpin run` of BIN: `timed`
(timed.py) and `misbehaves`, named as a program of a file of several (`several:misbehaves`,
several.py run with the argument `misbehaves`, as bench/gpu/cannot_help/programs.py is). Each
writes when its timed part and its check began and ended, its run's tag (from its gate's
name) and the budget `hotpin run` gave it. `misbehaves` exits in its timed part by hand in
round 1, hangs in it by hand in round 2, and hangs before its start gate as written in round
2. Exits 1 with what failed.
Usage: python3 check_gated.py BIN   (a folder with hotpin and libhotpin_preload.so)"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROUNDS = 2
CONFIGS = ["plain", "by-hand", "auto-first", "budget"]
HAND = 3 << 20
TIMEOUT = 4  # RUN_TIMEOUT and START_TIMEOUT of gated.py here, seconds
# The runs of `misbehaves` that write no window: (config, round) -> how they fail.
MISBEHAVES = {("by-hand", 1): "exits", ("by-hand", 2): "hangs", ("plain", 2): "never starts"}

TORCH = {
    "__init__.py": '''"""A stand-in torch for check_gated.py: no tensors, no GPU."""
import pickle
from . import backends, cuda, utils
class Tensor:
    pass
def manual_seed(seed):
    pass
def use_deterministic_algorithms(*args, **kwargs):
    pass
def zeros(*args, **kwargs):
    return 0
def save(obj, path):
    with open(path, "wb") as f:
        pickle.dump(obj, f)
def load(path):
    with open(path, "rb") as f:
        return pickle.load(f)
def equal(a, b):
    return a == b
''',
    "utils/__init__.py": "",
    "utils/deterministic.py": "fill_uninitialized_memory = True\n",
    "backends/__init__.py": "class cudnn:\n    benchmark = True\n",
    "cuda.py": "def synchronize():\n    pass\n",
}

WORKLOAD = '''import json, os, sys, time
import common
import torch

TAG = os.path.basename(os.environ["HOTPIN_BENCH_GATE"])
MISBEHAVES = NAME == "misbehaves"


class Result:
    def __init__(self, value):
        self.value = value
    def detach(self):
        return self
    def cpu(self):
        return self.value


if MISBEHAVES and TAG.endswith(".plain.2"):
    time.sleep(600)  # never reaches its start gate
common.start()
timed_began = time.time()
began = time.perf_counter()
total = sum(i * i for i in range(200000)) % 1009
time.sleep(0.15)
if MISBEHAVES and TAG.endswith(".by-hand.1"):
    sys.exit("exits in its timed part")
if MISBEHAVES and TAG.endswith(".by-hand.2"):
    time.sleep(600)  # hangs in its timed part
seconds = time.perf_counter() - began
timed_ended = time.time()
checks, wrong = common.same_as_written(NAME, {"total": Result(total)})
with open(os.path.join(os.environ["WINDOWS"], TAG), "w") as f:
    json.dump({"timed": [timed_began, timed_ended],
               "check": [common._MARKS["checking"], time.time()],
               "budget": os.environ.get("HOTPIN_PINNED_BUDGET")}, f)
common.emit(seconds, checks, wrong, HAND)
'''


def expected(program):
    """The tags of `program`'s runs in the order gated.py lets them go."""
    tags = [(program, "reference", 0), (program, "auto-learn", 0)]
    tags += [(program, c, r) for r in range(1, ROUNDS + 1)
             for c in (CONFIGS if r % 2 else CONFIGS[::-1])]
    return tags


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.rsplit("Usage:", 1)[1].strip())
    bin_dir = os.path.abspath(sys.argv[1])
    failures = []
    with tempfile.TemporaryDirectory(prefix="check-gated-") as tmp:
        for path, text in TORCH.items():
            full = os.path.join(tmp, "torch", path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write(text)
        programs, out, windows = (os.path.join(tmp, d) for d in ("programs", "out", "windows"))
        for d in (programs, windows):
            os.makedirs(d)
        with open(os.path.join(programs, "timed.py"), "w") as f:
            f.write(f"NAME = 'timed'\nHAND = {HAND}\n" + WORKLOAD)
        with open(os.path.join(programs, "several.py"), "w") as f:
            f.write(f"import sys\nNAME = sys.argv[1]\nHAND = {HAND}\n" + WORKLOAD)
        env = dict(os.environ, PROGRAM_DIR=programs, WINDOWS=windows, RUN_TIMEOUT=str(TIMEOUT),
                   START_TIMEOUT=str(TIMEOUT), PYTHONPATH=os.pathsep.join([tmp, HERE]),
                   GROUP_ROUNDS="1")
        began = time.time()
        done = subprocess.run(
            [sys.executable, os.path.join(HERE, "gated.py"), bin_dir, out, str(ROUNDS),
             " ".join(CONFIGS), "timed", "several:misbehaves"],
            env=env, capture_output=True, text=True, timeout=300, check=False)
        took = time.time() - began
        if done.returncode != 0:
            sys.exit(f"check_gated.py: gated.py exited {done.returncode}: {done.stderr[-2000:]}")
        left = subprocess.run(["pgrep", "-f", programs], capture_output=True, text=True,
                              check=False).stdout.split()
        if left:
            failures.append(f"processes of the runs left behind: {left}")
        lines = [json.loads(text) for text in open(os.path.join(out, "online.jsonl"))]
        for program in ("timed", "misbehaves"):
            want = [t for t in expected(program) if t[1] != "reference"]
            got = [(r["program"], r["config"], r["round"]) for r in lines
                   if r["program"] == program]
            if got != want:
                failures.append(f"{program}: lines {got}, wanted {want}")
        for r in lines:
            key = (r["program"], r["config"], r["round"])
            how = MISBEHAVES.get(key[1:]) if key[0] == "misbehaves" else None
            if not 0 < r.get("elapsed", -1) < 120:
                failures.append(f"{key}: elapsed {r.get('elapsed')}")
            if how:
                if r["exit"] == 0 or "seconds" in r:
                    failures.append(f"{key} ({how}): recorded as if it worked: {r}")
                continue
            if r["exit"] != 0 or r.get("checks") != 1 or r.get("mismatches") != 0:
                failures.append(f"{key}: exit {r['exit']}, checks {r.get('checks')}, "
                                f"mismatches {r.get('mismatches')}: {r.get('stderr_tail', '')}")
            if key[1] in ("auto-first", "budget", "auto-learn") and not r.get("reports"):
                failures.append(f"{key}: no report of hotpin's: not run under hotpin run")
            if key[1] != "auto-learn" and not r.get("phases", {}).get("waited", 0) > 0:
                failures.append(f"{key}: no wait at the gate in its phases {r.get('phases')}")
        seen = {}
        for tag in os.listdir(windows):
            program, config, rnd = tag.split(".")
            seen[(program, config, int(rnd))] = json.load(open(os.path.join(windows, tag)))
        for key, w in seen.items():
            budget = str(HAND) if key[1] == "budget" else None
            if w["budget"] != budget:
                failures.append(f"{key}: hotpin run's budget {w['budget']}, wanted {budget}")
        order = [t for p in ("timed", "misbehaves") for t in expected(p)
                 if not (p == "misbehaves" and t[1:] in MISBEHAVES)]
        spans = sorted((w["timed"][0], w["timed"][1], key) for key, w in seen.items())
        if [key for _, _, key in spans] != order:
            failures.append(f"timed parts in the order {[k for _, _, k in spans]}, wanted {order}")
        for (b0, e0, k0), (b1, e1, k1) in zip(spans, spans[1:]):
            if b1 < e0:
                failures.append(f"the timed parts of {k0} and {k1} overlap: {b0}-{e0}, {b1}-{e1}")
        # The checks of a group wait for its last timed part; the reference's ends first. With
        # GROUP_ROUNDS=1 each round is a group, whose timed parts begin after the round
        # before it was checked (its processes, and their GPU memory, gone).
        for program in ("timed", "misbehaves"):
            groups = [[k for k in seen if k[0] == program and k[2] == r]
                      for r in range(ROUNDS + 1)]
            for group in groups:
                last_timed = max(seen[k]["timed"][1] for k in group)
                for k in group:
                    if seen[k]["check"][0] < last_timed:
                        failures.append(f"{k}: checked before its group's timed parts ended")
            for before, after in zip(groups, groups[1:]):
                last_check = max(seen[k]["check"][1] for k in before)
                for k in after:
                    if seen[k]["timed"][0] < last_check:
                        failures.append(f"{k}: timed before the group before it was checked")
            ref, learn = (program, "reference", 0), (program, "auto-learn", 0)
            if ref in seen and learn in seen and seen[learn]["check"][0] < seen[ref]["check"][1]:
                failures.append(f"{program}: the learning run checked before the reference saved")
        if took > 120:
            failures.append(f"gated.py took {took:.0f} s")
    if failures:
        sys.exit("check_gated.py: " + "\n".join(failures))
    print(f"check_gated.py: {len(lines)} runs under gated.py in {took:.0f} s: timed parts alone "
          "and in order, checks after them (the reference's first), the budget given, results "
          "checked; a run that exits, one that hangs and one that never starts recorded as "
          "failed, nothing left behind")


if __name__ == "__main__":
    main()
