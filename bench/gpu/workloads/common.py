"""What every workload of this folder shares: a deterministic start, the check of its result
against the program as written, and the one JSON line run.sh reads.

- `start()` fixes the seeds, asks PyTorch for deterministic kernels (cuBLAS's workspace set
  before CUDA starts), and starts CUDA outside the timed part. It turns off PyTorch's fill of
  new tensors that deterministic mode brings (FILL_UNINITIALIZED=1 keeps it).
- `same_as_written(name, result)` compares what the program computed with what the first run
  given the same WANT_DIR saved (gated.py makes that the program as written, its reference,
  and no other of its runs saves: HOTPIN_BENCH_REFERENCE=0 makes a missing reference a
  mismatch): bit for bit (`torch.equal`), so a speed-up that changed one bit is a failure.
  With no WANT_DIR it saves nothing and checks nothing (0 checks, said in the line).
- `emit(...)` prints the line: `seconds` (the timed work), `checks`, `mismatches`,
  `pinned_by_hand_bytes` (what BY_HAND=1 pins; 0 without it), `hand_bytes` (what BY_HAND=1
  pins, in every run: gated.py's budget), `phases` (below), and any extra fields; the exit
  status is 1 when anything mismatched.
- The gate (HOTPIN_BENCH_GATE, set by gated.py): at the end of `start()` (`ready()`) the run says
  `GATE.ready` and waits for `GATE.go`; at the start of `same_as_written` it says
  `GATE.timed` and waits for `GATE.check` (FIFOs: the waiting run sleeps in `open` until
  gated.py opens them), so that one run's timed part never overlaps another's work.

`phases`: where a run's wall time went before the line was printed, seconds since its launch
(HOTPIN_BENCH_T0, the launcher's clock; since this module's import without it): `python` (the
interpreter's start and the workload's imports before this module), `torch` (`import torch`),
`libraries` (the workload's other imports up to `start()`), `cuda` (`start()`), `build` (the
model, the data and the warm-up: from `start()` to the check, less the timed work),
`check` and `total`, and `waited` (at the gate: in no other phase). A run's `elapsed`
(run_line.py) less `total` is its exit.
"""
import json
import os
import sys
import time

_T0 = float(os.environ.get("HOTPIN_BENCH_T0") or time.time())
_MARKS = {"python": time.time()}
_WAITED = [0.0, 0.0]  # at the start gate, at the check gate
_GATE = os.environ.get("HOTPIN_BENCH_GATE")
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402

_MARKS["torch"] = time.time()

BY_HAND = os.environ.get("BY_HAND") == "1"


def _gate(said, wanted, which):
    """Says `said` and waits for `wanted` (the module's doc), where a gate is set: a FIFO
    gated.py made, whose open blocks until gated.py opens it to let this run go, so a waiting
    run never wakes beside the timed one (the first gated call, 2026-11-29, polled a file every
    20 ms instead; its figures did not differ from the FIFO call's beyond their spread)."""
    if not _GATE:
        return
    open(_GATE + "." + said, "w").close()
    began = time.time()
    with open(_GATE + "." + wanted, "rb") as fifo:
        fifo.read()
    _WAITED[which] = time.time() - began


def start(seed=0):
    _MARKS["libraries"] = time.time()
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    # Under deterministic algorithms PyTorch also fills every tensor `torch.empty` makes
    # (NaN), `.to("cpu")`'s fresh CPU tensors included: CPU work of the harness's, not of the
    # program a user runs (who does not ask for deterministic algorithms), so it is off (the
    # results stay deterministic: no workload reads memory it did not write). It weighed:
    # module_to's `.to("cpu")` phase from its history 3.0 s with it, 1.3 s without, by hand
    # 1.25 either way; as written 9.7 s with it (its pages faulted in before the copy), 44 s
    # without (docs/benchmarks.md, section 1). FILL_UNINITIALIZED=1 keeps the fill.
    if os.environ.get("FILL_UNINITIALIZED") != "1":
        # `import torch.utils.deterministic` here would make `torch` a local name of this
        # function (every workload failed at its first line so, 2d39d5c).
        import torch.utils.deterministic as deterministic

        deterministic.fill_uninitialized_memory = False
    torch.backends.cudnn.benchmark = False
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    ready()


def ready():
    """Marks the end of the run's start (CUDA started) and waits at the start gate, if one is
    set: `start()` ends so; a program that starts its own way (bench/gpu/cannot_help's, which
    keep PyTorch's defaults) calls it once CUDA has started."""
    _MARKS["cuda"] = time.time()
    _gate("ready", "go", 0)


def same_as_written(name, result):
    """(checks, mismatches) of `result` (a tensor, or a dict of tensors) against the saved one."""
    _gate("timed", "check", 1)
    _MARKS["checking"] = time.time()
    want_dir = os.environ.get("WANT_DIR")
    if not want_dir:
        return 0, 0
    if isinstance(result, torch.Tensor):
        result = {"result": result}
    result = {k: v.detach().cpu() for k, v in result.items()}
    path = os.path.join(want_dir, name + ".pt")
    if not os.path.exists(path):
        if os.environ.get("HOTPIN_BENCH_REFERENCE") == "0":
            # gated.py's runs other than the reference never save: a missing one is a failure.
            print(f"common.py: no reference result at {path}", file=sys.stderr)
            return 1, 1
        os.makedirs(want_dir, exist_ok=True)
        torch.save(result, path + ".tmp")
        os.replace(path + ".tmp", path)
    want = torch.load(path)
    wrong = sum(1 for k in want if k not in result or not torch.equal(result[k], want[k]))
    return len(want), wrong


def phases(seconds):
    """Seconds of each phase of this run so far (the module's doc)."""
    now = time.time()
    at = dict(_MARKS)
    at.setdefault("libraries", at["torch"])
    at.setdefault("cuda", at["libraries"])
    at.setdefault("checking", now)
    spans = {"python": at["python"] - _T0, "torch": at["torch"] - at["python"],
             "libraries": at["libraries"] - at["torch"], "cuda": at["cuda"] - at["libraries"],
             "build": at["checking"] - at["cuda"] - seconds - sum(_WAITED),
             "check": now - at["checking"], "waited": sum(_WAITED), "total": now - _T0}
    return {k: round(v, 3) for k, v in spans.items()}


def emit(seconds, checks, mismatches, pinned_by_hand_bytes, **extra):
    line = {"seconds": round(seconds, 4), "checks": checks, "mismatches": mismatches,
            "pinned_by_hand_bytes": pinned_by_hand_bytes if BY_HAND else 0,
            "hand_bytes": pinned_by_hand_bytes, "phases": phases(seconds)}
    line.update(extra)
    print(json.dumps(line), flush=True)
    sys.exit(1 if mismatches else 0)
