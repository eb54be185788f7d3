"""The workloads' runs with their starts overlapped and their timed parts alone, so that the six
fit one 10-minute device call (#43). A run of these programs is 10-22 s of wall time on the
H200 for 0.3-4 s of work: `import torch` 3-4.5 s, transformers' or diffusers' imports 8-14
s (CUDA's start included), CUDA's start 4.4-6 s otherwise (measured 2026-11-29, common.py's
`phases`). Run one after another, a workload's 17 runs took 3.5-6 minutes, and the six did
not fit one call; run so, they took 481-491 s in one call.

So, per workload, two groups of processes, each started at once:
1. the program as written, the reference (it saves what it computed: every later run is
   checked bit for bit against it, common.py), and hotpin's learning run (the history the
   runs "from history" start from);
2. ROUNDS rounds of CONFIGS (GROUP_ROUNDS rounds a group where it is set: below), in that
   order within odd rounds and the reverse within even ones
   (a run's place in its round, where the machine drifts, counts against no configuration
   more than another; before 2026-11-29's thirty-first session every round kept the order):
   plain (as written), by-hand
   (BY_HAND=1), auto-first (`hotpin run`, no history), auto-history (`hotpin run` from a fresh
   copy of the learned history each round), auto-history-at-birth (the same, with
   HOTPIN_AT_FIRST_COPY=0), auto-history-first-copy (the same, with HOTPIN_AHEAD=0: the
   history's blocks registered at their first copy, not ahead), auto-history-ahead
   (HOTPIN_AHEAD=1, the default since 2026-11-29: kept to read the runs made before), budget
   (auto-first with `--budget` = the bytes the program pins by hand, its `hand_bytes`, read
   from the reference's line), auto-first-costs (auto-first with HOTPIN_COSTS=$COSTS, a cost
   file `hotpin calibrate` wrote on this machine: the built-in model is the H100's),
   interposer-alone (the program with LD_PRELOAD=BIN/libhotpin_preload.so and no `hotpin run`:
   the interposer loaded, no mode), pin-none (`hotpin run --mode pin-none`): these two tell
   where a cost of hotpin's lies.
Each process imports its libraries and starts CUDA, then waits at common.py's gate (it sleeps
in the `open` of a FIFO until it is let go: a waiting process never wakes). Once every process of the group
waits, each is let go in turn: it builds its model, runs its warm-up and its timed part, and
waits again before its check; the next is let go only then. No other process of the bench
does any work while one is timed. Then the
checks run (the reference's first: it writes what the others read) and the processes exit.
(A process holding a CUDA context throughout did not shorten CUDA's start: 4.4-6.0 s without
it, 4.9-6.9 s with it, in the first calls of 2026-11-29; it is not kept.)

What changes against runs one at a time: the processes of a group are alive at once (the
others idle, 1-3 GiB of memory each, pinned memory included for those that pinned it), and a
run's `elapsed` includes its waits (common.py's `phases` gives `waited` apart). hotpin's
decisions depend on the time between copies, never on the time before the build. Whether the
idle processes slow a timed one was not measured apart: against the runs one at a time of
2026-11-28 (other calls, other days) most figures are within the spread between calls, and
kv_swap by hand is slower (1.39-1.74 s against 0.99-1.51), docs/benchmarks.md section 1. A hotpin run's
pinner thread may still be finishing work its timed part queued when the next run is let go
(not measured). A run that does not reach a gate in time (START_TIMEOUT, RUN_TIMEOUT) is
killed with its process group before the next is let go, and recorded as failed; a workload
whose reference failed is skipped (a line says so): no other run saves a result to be
checked against.

Writes OUT/online.jsonl, one line a run, as bench/gpu/online/run.sh does (run_line.py: the
program's line, the interposer's counters summed over the run's reports), and the reference's
output in OUT/PROGRAM.reference.out.
Usage: python3 gated.py BIN OUT ROUNDS CONFIGS WORKLOAD...   (run.sh calls it)
A WORKLOAD is NAME (the program NAME.py) or FILE:NAME (FILE.py run with the argument NAME: one
file of several programs, as bench/gpu/cannot_help/programs.py; its runs are named NAME).
Environment: RUN_TIMEOUT (seconds a run may take once let go, default 120), START_TIMEOUT
(seconds a run may take to reach its start gate, default 300), GROUP_ROUNDS (rounds started
at once as one group, default all: every process of a group holds its GPU memory until the
group's checks, and on an 80 GB card more than 12 rounds of 3 of cannot_help's loaders ran
it out of memory, docs/benchmarks.md section 2), PYTHON,
PROGRAM_DIR (where the workloads are, default this folder; check_gated.py's own), COSTS
(the cost file of auto-first-costs)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RUN_LINE = os.path.join(HERE, "..", "run_line.py")
PROGRAMS = os.path.abspath(os.environ.get("PROGRAM_DIR", HERE))
PYTHON = os.environ.get("PYTHON", "python3")
RUN_TIMEOUT = float(os.environ.get("RUN_TIMEOUT", "120"))
START_TIMEOUT = float(os.environ.get("START_TIMEOUT", "300"))
# Rounds a group of processes started at once holds (every round by default).
_group = os.environ.get("GROUP_ROUNDS", "")
if _group and not (_group.isdigit() and int(_group) > 0):
    sys.exit(f"gated.py: GROUP_ROUNDS={_group!r}: a number of rounds, 1 or more")
GROUP_ROUNDS = int(_group) if _group else 1 << 30
POLL = 0.02
KNOWN = ("plain", "by-hand", "auto-first", "auto-first-costs", "auto-history",
         "auto-history-at-birth", "auto-history-first-copy", "auto-history-ahead", "budget",
         "interposer-alone", "pin-none")


def say(text):
    print(text, file=sys.stderr, flush=True)


class Run:
    """One process of a group: its program, configuration, round and command."""

    def __init__(self, out, program, config, rnd, cmd, env, report="", extra=None):
        self.program, self.config, self.rnd = program, config, rnd
        self.tag = f"{program}.{config}.{rnd}"
        self.gate = os.path.join(out, "gates", self.tag)
        self.stdout = os.path.join(out, self.tag + ".out")
        self.stderr = os.path.join(out, self.tag + ".err")
        self.report, self.extra, self.cmd = report, extra or {}, cmd
        self.env = dict(env, HOTPIN_BENCH_GATE=self.gate,
                        HOTPIN_BENCH_REFERENCE="1" if config == "reference" else "0")
        self.proc, self.launched, self.ended = None, 0.0, 0.0

    def launch(self):
        for suffix in ("ready", "go", "timed", "check"):
            if os.path.lexists(self.gate + "." + suffix):
                os.remove(self.gate + "." + suffix)
        os.mkfifo(self.gate + ".go")
        os.mkfifo(self.gate + ".check")
        if self.report:
            prefix = os.path.basename(self.report) + "."
            folder = os.path.dirname(self.report)
            for name in os.listdir(folder):
                if name.startswith(prefix) and name.endswith(".json"):
                    os.remove(os.path.join(folder, name))
        self.launched = time.time()
        self.env["HOTPIN_BENCH_T0"] = repr(self.launched)
        # A session of its own: a kill reaches `hotpin run`, Python and a DataLoader's workers.
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=open(self.stdout, "wb"),
                                     stderr=open(self.stderr, "wb"), start_new_session=True)

    def at(self, suffix):
        return os.path.exists(self.gate + "." + suffix)

    def alive(self):
        if self.proc.poll() is None:
            return True
        if not self.ended:
            self.ended = time.time()
        return False

    def kill(self, why):
        """Kills the run's whole process group and waits for its leader, so that nothing of it
        is still running when the next run is let go."""
        if self.alive():
            say(f"{self.tag}: {why}, killed")
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
            self.alive()

    def wait_for(self, suffix, timeout):
        """Until the process signalled `suffix` (true) or exited or ran out of time (false)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.at(suffix):
                return True
            if not self.alive():
                return self.at(suffix)
            time.sleep(POLL)
        return False

    def let_go(self, suffix):
        """Opens the FIFO `suffix` the process waits on (or will: it said it reached its gate
        just before opening it), which lets it go; false where it exited first, or did not
        open it within 10 s (then it is killed)."""
        deadline = time.time() + 10
        while True:
            try:
                os.close(os.open(self.gate + "." + suffix, os.O_WRONLY | os.O_NONBLOCK))
                return True
            except OSError:  # ENXIO: no reader yet
                if not self.alive():
                    return False
                if time.time() > deadline:
                    self.kill(f"not waiting at its gate {suffix}")
                    return False
                time.sleep(0.001)

    def finish(self, timeout):
        deadline = time.time() + timeout
        while self.alive() and time.time() < deadline:
            time.sleep(POLL)
        self.kill(f"still running after {timeout:.0f} s")

    def line(self, jsonl):
        """Appends this run's line (run_line.py's) to `jsonl`, and says it."""
        done = subprocess.run(
            [sys.executable, RUN_LINE, self.program, self.config, str(self.rnd),
             str(self.proc.returncode), self.stdout, self.stderr, self.report,
             repr(self.ended - self.launched), json.dumps(self.extra)],
            capture_output=True, text=True, check=False)
        if done.returncode != 0:
            say(f"{self.tag}: run_line.py failed: {done.stderr[-400:]}")
            return
        with open(jsonl, "a") as f:
            f.write(done.stdout)
        d = json.loads(done.stdout)
        pinned = d.get("counters", {}).get("peak_pinned_bytes", d.get("pinned_by_hand_bytes", 0))
        say(f"{self.program}: {self.config} round {self.rnd}: exit {d['exit']}, "
            f"{d.get('seconds', '-')} s, {d.get('checks', '-')} checks, "
            f"{d.get('mismatches', '-')} mismatches, pinned {(pinned or 0) >> 20} MiB")


def run_group(runs, jsonl, first_checks=()):
    """Starts `runs` at once, lets each run its timed part alone in order, then their checks
    (those in `first_checks` first, one at a time) and their exits; their lines go to
    `jsonl` (the reference's, whose config is "reference", only to its .out file). A run
    that does not reach a gate in time is killed, with its process group, before the next
    is let go; whatever goes wrong here, no run of the group is left waiting."""
    try:
        for run in runs:
            run.launch()
        for run in runs:
            if not run.wait_for("ready", START_TIMEOUT):
                run.kill(f"not at its start gate after {START_TIMEOUT:.0f} s")
        for run in runs:
            if run.at("ready") and run.alive() and run.let_go("go") \
                    and not run.wait_for("timed", RUN_TIMEOUT):
                run.kill(f"its timed part not done after {RUN_TIMEOUT:.0f} s")
        for run in runs:
            if run in first_checks:
                run.let_go("check")
                run.finish(RUN_TIMEOUT)
        for run in runs:
            if run not in first_checks:
                run.let_go("check")
        for run in runs:
            run.finish(RUN_TIMEOUT)
    finally:
        for run in runs:
            if run.proc is not None:
                run.kill("left behind by an error of gated.py")
    for run in runs:
        if run.config != "reference":
            run.line(jsonl)


def hotpin(bin_dir, options, report, program):
    return [os.path.join(bin_dir, "hotpin"), "run", *options, "--report", report, "--",
            PYTHON, *program]


def program_of(workload_name):
    """(name, the program's file and arguments) of a WORKLOAD (the usage above)."""
    file, colon, name = workload_name.partition(":")
    if not colon:
        return workload_name, [os.path.join(PROGRAMS, workload_name + ".py")]
    return name, [os.path.join(PROGRAMS, file + ".py"), name]


def workload(bin_dir, out, rounds, configs, p, jsonl, env):
    p, program = program_of(p)
    want = os.path.join(env["WANT_DIR"], p + ".pt")
    if os.path.exists(want):
        os.remove(want)
    learned = os.path.join(out, p + ".learned.hotpin")
    if os.path.exists(learned):
        os.remove(learned)
    plain_env = {k: v for k, v in env.items() if k != "BY_HAND"}
    reference = Run(out, p, "reference", 0, [PYTHON, *program], plain_env)
    learn_report = os.path.join(out, f"{p}.auto-learn.0")
    learn = Run(out, p, "auto-learn", 0,
                hotpin(bin_dir, ["--mode", "auto", "--history", learned], learn_report, program),
                plain_env, learn_report)
    run_group([reference, learn], jsonl, first_checks=(reference,))
    shutil.copy(reference.stdout, os.path.join(out, p + ".reference.out"))
    ref = None
    for text in reversed(open(reference.stdout, errors="replace").read().splitlines()):
        if text.startswith("{"):
            ref = json.loads(text)
            break
    say(f"{p}: as written, the reference: exit {reference.proc.returncode} "
        f"{json.dumps(ref)[:200] if ref else 'no line'}")
    if reference.proc.returncode != 0 or not ref or not os.path.exists(want):
        say(f"{p}: the reference failed: nothing to check the runs against, workload skipped")
        with open(jsonl, "a") as f:
            f.write(json.dumps({"program": p, "config": "reference", "round": 0,
                                "skipped": "the reference failed (its .err says why)"}) + "\n")
        return
    hand = ref.get("hand_bytes", 0)
    runs = []
    for r in range(1, rounds + 1):
        for config in (configs if r % 2 else configs[::-1]):
            report = os.path.join(out, f"{p}.{config}.{r}")
            if config == "plain":
                runs.append(Run(out, p, config, r, [PYTHON, *program], plain_env))
            elif config == "by-hand":
                runs.append(Run(out, p, config, r, [PYTHON, *program],
                                dict(plain_env, BY_HAND="1")))
            elif config == "interposer-alone":
                runs.append(Run(out, p, config, r, [PYTHON, *program],
                                dict(plain_env, LD_PRELOAD=os.path.join(
                                    os.path.abspath(bin_dir), "libhotpin_preload.so"))))
            elif config == "pin-none":
                runs.append(Run(out, p, config, r,
                                hotpin(bin_dir, ["--mode", "pin-none"], report, program),
                                plain_env, report))
            elif config in ("auto-first", "auto-first-costs", "budget"):
                history = os.path.join(out, f"{p}.{config}.{r}.hotpin")
                if os.path.exists(history):
                    os.remove(history)
                options = ["--mode", "auto", "--history", history]
                extra = None
                if config == "budget":
                    if not hand:
                        say(f"{p}: budget round {r}: skipped (the reference printed no hand_bytes)")
                        continue
                    options += ["--budget", str(hand)]
                    extra = {"budget_bytes": hand}
                run_env = plain_env
                if config == "auto-first-costs":
                    if not os.environ.get("COSTS"):
                        raise SystemExit("auto-first-costs needs COSTS=FILE (hotpin calibrate -o FILE)")
                    run_env = dict(plain_env, HOTPIN_COSTS=os.environ["COSTS"])
                runs.append(Run(out, p, config, r, hotpin(bin_dir, options, report, program),
                                run_env, report, extra))
            elif config in ("auto-history", "auto-history-at-birth", "auto-history-first-copy",
                            "auto-history-ahead"):
                if not os.path.exists(learned) or os.path.getsize(learned) == 0:
                    say(f"{p}: {config} round {r}: skipped (no learned history)")
                    continue
                history = os.path.join(out, f"{p}.{config}.{r}.hotpin")
                shutil.copy(learned, history)
                run_env = dict(plain_env)
                if config == "auto-history-at-birth":
                    run_env["HOTPIN_AT_FIRST_COPY"] = "0"
                if config == "auto-history-first-copy":
                    run_env["HOTPIN_AHEAD"] = "0"
                if config == "auto-history-ahead":
                    run_env["HOTPIN_AHEAD"] = "1"
                runs.append(Run(out, p, config, r,
                                hotpin(bin_dir, ["--mode", "auto", "--history", history], report,
                                       program), run_env, report))
            else:
                say(f"gated.py: unknown configuration {config}, skipped")
    # GROUP_ROUNDS rounds a group: every process of a group holds its GPU memory until the
    # group's checks, so a program that keeps its batches there fits only so many at once.
    for first in range(1, rounds + 1, GROUP_ROUNDS):
        run_group([run for run in runs if first <= run.rnd < first + GROUP_ROUNDS], jsonl)


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__.rsplit("Usage:", 1)[1].strip())
    bin_dir, out, rounds, configs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split()
    workloads = sys.argv[5:]
    unknown = [c for c in configs if c not in KNOWN]
    if unknown:
        sys.exit(f"gated.py: unknown configurations {unknown} (known: {', '.join(KNOWN)})")
    if not os.access(os.path.join(bin_dir, "hotpin"), os.X_OK):
        sys.exit(f"gated.py: no hotpin binary at {bin_dir}/hotpin")
    bin_dir, out = os.path.abspath(bin_dir), os.path.abspath(out)
    os.makedirs(os.path.join(out, "gates"), exist_ok=True)
    jsonl = os.path.join(out, "online.jsonl")
    if os.path.exists(jsonl) and os.path.getsize(jsonl):
        os.rename(jsonl, jsonl + time.strftime(".%Y%m%d-%H%M%S"))
    env = dict(os.environ, WANT_DIR=os.path.join(out, "want"), PYTHONUNBUFFERED="1")
    for p in workloads:
        file = program_of(p)[1][0]
        if not os.path.exists(file):
            say(f"{p}: no {file}, skipped")
            continue
        began = time.time()
        workload(bin_dir, out, rounds, configs, p, jsonl, env)
        say(f"{p}: done in {time.time() - began:.0f} s")


if __name__ == "__main__":
    main()
