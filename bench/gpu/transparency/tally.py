"""What the transparency check programs share: their tallies (checks and mismatches per
check, a few details of each mismatch, observed answers, errors, copies by direction), the
data salt, and the run of all checks that ends in the one JSON line run.sh reads."""
import json
import sys
import time
import traceback

checks = {}
details = {}
observed = {}
errors = {}
copies = {"h2d": 0, "d2h": 0, "h2d_bytes": 0, "d2h_bytes": 0}


def count(name, ok, info=""):
    """One check of `name`: a mismatch unless `ok` (with up to 5 details kept)."""
    c = checks.setdefault(name, [0, 0])
    c[0] += 1
    if not ok:
        c[1] += 1
        d = details.setdefault(name, [])
        if len(d) < 5:
            d.append(info)


def h2d(nbytes):
    copies["h2d"] += 1
    copies["h2d_bytes"] += nbytes


def d2h(nbytes):
    copies["d2h"] += 1
    copies["d2h_bytes"] += nbytes


def salt(step, which=0):
    """The data of a step (and a buffer of it): never the same twice."""
    return (step + 1) * 1009 + which * 100003


def run_all(program, steps, wall0, start, named_checks, recover=lambda: None):
    """Runs each (name, function, args) of `named_checks`; a check that raises is recorded
    under errors (its traceback on stderr), `recover` runs, and the others still run. Prints
    the JSON line and returns the exit status: 1 if a check raised, else 0."""
    for name, fn, args in named_checks:
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - one check's crash is recorded, not fatal
            traceback.print_exc()
            errors[name] = f"{type(e).__name__}: {e}"[:400]
            try:
                recover()
            except Exception:  # noqa: BLE001
                pass
    seconds = time.perf_counter() - start
    print(json.dumps({"program": program, "steps": steps, "seconds": seconds,
                      "wall_seconds": time.perf_counter() - wall0, "checks": checks,
                      "observed": observed, "copies": copies, "errors": errors,
                      "details": details}), flush=True)
    return 1 if errors else 0


if __name__ == "__main__":
    # A self-test without a GPU: two checks, one raising.
    count("ok", True)
    count("bad", False, "x")
    def boom():
        raise ValueError("boom")
    code = run_all("self_test", 1, time.perf_counter(), time.perf_counter(),
                   [("count", count, ("ok", True)), ("boom", boom, ())])
    assert code == 1 and checks == {"ok": [2, 0], "bad": [1, 1]} and "boom" in errors
    sys.exit(0)
