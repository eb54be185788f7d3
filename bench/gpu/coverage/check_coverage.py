"""Compares a tracer history (JSON) with a coverage program's ground truth (the last line of
TRUTH_FILE that starts with "{"); prints one JSON line.

Usage: check_coverage.py HISTORY TRUTH_FILE NAME MODE [EXTRA_JSON]

MODE is "record" (traced from the first instruction: the truth's "setup" copies, made before the
gate, are expected too) or "pid" (attached at the gate: only the measured phase). EXTRA_JSON, an
object, is merged into the output (run.sh passes exit codes). Never fails on a missing key or
file: the problem is reported in "error" with ok false."""
import json
import sys

KEYS = ("h2d", "d2h", "h2d_bytes", "d2h_bytes")


def num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else 0


def first(d, *names):
    """The value of the first of `names` present in `d`, else None."""
    for n in names:
        if n in d:
            return d[n]
    return None


def compare(truth_value, traced_value):
    return {"truth": truth_value, "traced": traced_value,
            "match": None if traced_value is None else traced_value == truth_value}


def main(argv):
    if len(argv) < 5:
        print("usage: check_coverage.py HISTORY TRUTH_FILE NAME MODE [EXTRA_JSON]", file=sys.stderr)
        return 2
    history_path, truth_path, name, mode = argv[1:5]
    out = {"program": name, "mode": mode, "exact": False, "attributed": None, "ok": False}
    if len(argv) > 5:
        try:
            extra = json.loads(argv[5])
            if isinstance(extra, dict):
                out.update(extra)
        except ValueError:
            out["extra_unparsed"] = argv[5]
    errors = []

    truth = None
    try:
        with open(truth_path, errors="replace") as f:
            lines = [l for l in f if l.startswith("{")]
        if lines:
            truth = json.loads(lines[-1])
        else:
            errors.append("no truth line in program output")
    except (OSError, ValueError) as e:
        errors.append(f"truth: {e}")

    history = None
    try:
        with open(history_path) as f:
            history = json.load(f)
        if not isinstance(history, dict):
            errors.append("history is not a JSON object")
            history = None
    except (OSError, ValueError) as e:
        errors.append(f"history: {e}")

    if truth is not None:
        out["truth"] = {k: truth.get(k) for k in KEYS if k in truth}
        if "by_kind" in truth:
            out["truth_by_kind"] = truth["by_kind"]
    if history is None:
        out["error"] = "; ".join(errors)
        print(json.dumps(out))
        return 0

    stats = history.get("stats") or {}
    # Folded allocations (a bounded history: --max-allocations) count like the others.
    allocations = (history.get("allocations") or []) + (history.get("compacted") or [])

    def astats(a):
        return (a.get("stats") or {}) if isinstance(a, dict) else {}

    traced = {
        "h2d": sum(num(astats(a).get("h2d_count")) for a in allocations),
        "d2h": sum(num(astats(a).get("d2h_count")) for a in allocations),
        "h2d_bytes": num(stats.get("h2d_bytes")),
        "d2h_bytes": num(stats.get("d2h_bytes")),
    }
    kernel = stats.get("kernel") or {}
    lost = (num(kernel.get("ringbuf_full")) + num(kernel.get("host_ringbuf_full"))
            + num(kernel.get("unread_copies")) + num(stats.get("decode_errors")))

    bytes_by_kind = {}
    for a in allocations:
        s = astats(a)
        b = num(s.get("h2d_bytes")) + num(s.get("d2h_bytes"))
        if b:
            kind = a.get("kind", "?")
            bytes_by_kind[kind] = bytes_by_kind.get(kind, 0) + b
    total = traced["h2d_bytes"] + traced["d2h_bytes"]
    credited = sum(b for k, b in bytes_by_kind.items() if k != "untracked")
    attributed = round(credited / total, 3) if total else 1.0

    out.update({"attributed": attributed, "traced": traced, "lost": lost,
                "unresolved": stats.get("unresolved_copies", 0),
                "other_copies": num(stats.get("other_copies", 0)),
                "untracked_transfers": stats.get("untracked_transfers"),
                "bytes_by_kind": bytes_by_kind,
                "calls": stats.get("calls"),
                "calls_by_function": stats.get("calls_by_function")})

    if truth is not None:
        setup = truth.get("setup") if mode == "record" else None
        setup = setup if isinstance(setup, dict) else {}
        expected = {k: num(truth[k]) + num(setup.get(k)) for k in KEYS if k in truth}
        out["expected"] = expected
        if setup:
            out["setup"] = {k: setup.get(k) for k in KEYS if k in setup}
        out["difference"] = {k: traced[k] - expected[k] for k in expected}
        out["exact"] = bool(expected) and all(traced[k] == expected[k] for k in expected) and lost == 0
        out["at_least"] = bool(expected) and all(traced[k] >= expected[k] for k in expected) and lost == 0

        if any(k in truth for k in ("prefetch_to_device", "prefetch_to_host",
                                     "prefetch_to_device_bytes", "prefetch_to_host_bytes")):
            out["prefetch"] = {
                "to_device": compare(truth.get("prefetch_to_device"),
                                     first(stats, "prefetches_to_device", "prefetch_to_device")),
                "to_host": compare(truth.get("prefetch_to_host"),
                                   first(stats, "prefetches_to_host", "prefetch_to_host")),
                "to_device_bytes": compare(truth.get("prefetch_to_device_bytes"),
                                           first(stats, "prefetches_to_device_bytes",
                                                 "prefetch_to_device_bytes", "prefetched_to_device_bytes")),
                "to_host_bytes": compare(truth.get("prefetch_to_host_bytes"),
                                         first(stats, "prefetches_to_host_bytes",
                                               "prefetch_to_host_bytes", "prefetched_to_host_bytes")),
            }
        if "d2d" in truth:
            peer, other = num(stats.get("peer_copies", 0)), num(stats.get("other_copies", 0))
            out["d2d"] = {"truth": truth.get("d2d"), "peer_copies": peer, "other_copies": other,
                          "match": peer + other == num(truth.get("d2d"))}
        if "device_leaked_bytes" in truth:
            # Device memory still allocated at the end: the live bytes of each process
            # (`device_memory` is a list of [pid, {live_bytes, peak_bytes}] pairs).
            live = sum(num((m or {}).get("live_bytes"))
                       for _, m in (stats.get("device_memory") or []))
            out["device_leaked_bytes"] = compare(truth.get("device_leaked_bytes"), live)
    out["ok"] = bool(out["exact"]) and attributed >= 0.95
    if errors:
        out["error"] = "; ".join(errors)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
