"""CI's check of gated.py (`cargo xtask test` runs it; no GPU, no PyTorch): the six workloads'
one-call harness must let no run's timed part overlap another's, run them in the interleaved
order, give the budget run the bytes the program pins by hand, check every result against
the reference, and record a run that fails in its timed part without holding up the others.

It runs gated.py over two stand-in workloads (a stand-in `torch` of a few functions, written
to a temporary folder: common.py needs no more) under the real `hotpin run` of BIN: `timed`
writes the window of its timed part (and its run's tag, from its gate's name), and `fails_by_hand` exits in its timed part when
BY_HAND=1. Exits 1 with what failed.
Usage: python3 check_gated.py BIN   (a folder with hotpin and libhotpin_preload.so)"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROUNDS = 2
CONFIGS = ["plain", "by-hand", "auto-first", "budget"]

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

WORKLOAD = '''import os, sys, time
import common
import torch

class Result:
    def __init__(self, value):
        self.value = value
    def detach(self):
        return self
    def cpu(self):
        return self.value

common.start()
began_at = time.time()
began = time.perf_counter()
total = sum(i * i for i in range(200000)) % 1009
time.sleep(0.15)
if FAILS and os.environ.get("BY_HAND") == "1":
    sys.exit("fails in its timed part, by hand")
seconds = time.perf_counter() - began
with open(os.path.join(os.environ["WINDOWS"], f"{NAME}.{os.getpid()}"), "w") as f:
    f.write(f"{began_at!r} {time.time()!r} {os.path.basename(os.environ['HOTPIN_BENCH_GATE'])}\\n")
checks, wrong = common.same_as_written(NAME, {"total": Result(total)})
common.emit(seconds, checks, wrong, 3 << 20)
'''


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
        for name, fails in (("timed", False), ("fails_by_hand", True)):
            with open(os.path.join(programs, name + ".py"), "w") as f:
                f.write(f"NAME = {name!r}\nFAILS = {fails}\n" + WORKLOAD)
        env = dict(os.environ, PROGRAM_DIR=programs, WINDOWS=windows, RUN_TIMEOUT="60",
                   PYTHONPATH=os.pathsep.join([tmp, HERE]))
        done = subprocess.run(
            [sys.executable, os.path.join(HERE, "gated.py"), bin_dir, out, str(ROUNDS),
             " ".join(CONFIGS), "timed", "fails_by_hand"],
            env=env, capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            sys.exit(f"check_gated.py: gated.py exited {done.returncode}: {done.stderr[-2000:]}")
        lines = [json.loads(text) for text in open(os.path.join(out, "online.jsonl"))]
        by = {(r["program"], r["config"], r["round"]): r for r in lines}
        # Every run has its line, in gated.py's order.
        for program in ("timed", "fails_by_hand"):
            want = [(program, "auto-learn", 0)] + [(program, c, r) for r in range(1, ROUNDS + 1)
                                                    for c in CONFIGS]
            got = [(r["program"], r["config"], r["round"]) for r in lines
                   if r["program"] == program]
            if got != want:
                failures.append(f"{program}: lines {got}, wanted {want}")
        for key, r in by.items():
            program, config, _ = key
            fails = program == "fails_by_hand" and config == "by-hand"
            if fails:
                if r["exit"] == 0 or "seconds" in r:
                    failures.append(f"{key}: should have failed in its timed part: {r}")
                continue
            if r["exit"] != 0 or r.get("checks") != 1 or r.get("mismatches") != 0:
                failures.append(f"{key}: exit {r['exit']}, checks {r.get('checks')}, "
                                f"mismatches {r.get('mismatches')}: {r.get('stderr_tail', '')}")
            if config == "budget" and r.get("budget_bytes") != 3 << 20:
                failures.append(f"{key}: budget_bytes {r.get('budget_bytes')}, wanted {3 << 20}")
            if config in ("auto-first", "budget", "auto-learn") and not r.get("reports"):
                failures.append(f"{key}: no report of hotpin's: not run under hotpin run")
            phases = r.get("phases", {})
            if config != "auto-learn" and key[2] > 0 and not phases.get("waited", 0) > 0:
                failures.append(f"{key}: no wait at the gate in its phases {phases}")
        # The timed parts, each alone, in the order the runs were let go.
        spans = []
        for name in os.listdir(windows):
            began, ended, tag = open(os.path.join(windows, name)).read().split()
            spans.append((float(began), float(ended), tag))
        spans.sort()
        order = [f"{p}.{c}.{r}" for p in ("timed", "fails_by_hand")
                 for c, r in [("reference", 0), ("auto-learn", 0)]
                 + [(c, r) for r in range(1, ROUNDS + 1) for c in CONFIGS]
                 if not (p == "fails_by_hand" and c == "by-hand")]
        if [tag for _, _, tag in spans] != order:
            failures.append(f"timed parts in the order {[t for _, _, t in spans]}, wanted {order}")
        wanted_spans = 2 * (2 + ROUNDS * len(CONFIGS)) - ROUNDS  # the failing by-hand runs wrote none
        if len(spans) != wanted_spans:
            failures.append(f"{len(spans)} timed parts recorded, wanted {wanted_spans}")
        for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
            if b1 < e0:
                failures.append(f"the timed parts of {n0} and {n1} overlap: {b0}-{e0}, {b1}-{e1}")
    if failures:
        sys.exit("check_gated.py: " + "\n".join(failures))
    print(f"check_gated.py: {len(lines)} runs under gated.py, timed parts alone and in order, "
          "results checked, the failing run recorded")


if __name__ == "__main__":
    main()
