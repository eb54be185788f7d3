#!/usr/bin/env bash
# The node's pinned-memory budget on the GPU machine (#27): two unmodified PyTorch programs at
# once under `hotpin run`, a dense one (hot_loop.py, no work between its copies) and a sparse
# one (the same copies with GPU work between them), with a node budget smaller than their two
# hot sets (4 x 64 MiB each). Per round, interleaved:
#   plain      both as written
#   leases     hotpin run, leases from `tracer daemon --node-budget $BUDGET`
#   share      hotpin run --lease-socket off --budget $SHARE: first come, first served, each
#              process with a fixed share of the node budget
#   unlimited  hotpin run --lease-socket off, no budget (what the budget costs)
# Every run is auto mode's first (a history file of its own, fresh). A sampler reads the
# daemon's metrics and /proc every 100 ms (samples.tsv): the budget must hold at every sample.
# Then once: two dense programs under leases, one killed with SIGKILL after 4 s; how long its
# leases outlive it, and how long until the other holds its whole hot set (kill.json).
# SECOND=pool_loop runs the sparse role as CuPy's pinned-pool program (pool_loop.py: its
# portable pinned requests, kept pinned by hotpin, must be leased too: #40 item 4).
# Usage: BIN=dir OUT=dir bash bench/gpu/leases/run.sh ROUNDS
set -u
BIN=$(cd "${BIN:-target/release}" && pwd)
OUT=${OUT:-/tmp/hotpin-leases}
ROUNDS=${1:-3}
BUDGET=${BUDGET:-320M}
SHARE=${SHARE:-160M}
DENSE=${DENSE:-"200 4 0"}
SPARSE=${SPARSE:-"60 4 40"}
PORT=${PORT:-9477}
SECOND=${SECOND:-hot_loop}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SOCK="$OUT/lease.sock"
export PYTHONUNBUFFERED=1
: > "$OUT/runs.jsonl"

"$BIN/tracer" daemon --store "$OUT/store" --metrics "127.0.0.1:$PORT" --lease-socket "$SOCK" \
  --node-budget "$BUDGET" --command '*_loop*' 2> "$OUT/daemon.log" &
DAEMON=$!
for _ in $(seq 1 300); do
  grep -q "tracing every CUDA process" "$OUT/daemon.log" && break
  sleep 0.2
done
grep "tracing every" "$OUT/daemon.log" || { echo "run.sh: the daemon did not start" >&2; cat "$OUT/daemon.log" >&2; exit 1; }

echo setup > "$OUT/phase"
metric() { awk -v n="$1" '$1 == n { print $2; exit }' "$2"; }
# The metrics in the classic text format (curl, else Python's urllib).
fetch() {
  curl -s "127.0.0.1:$PORT/metrics" 2>/dev/null ||
    python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:$PORT/metrics').read().decode())"
}
sampler() {
  printf 'unix_s\tphase\tnode_pinned\tnode_leased\tclients\tvmpin_kib\trss_shmem_kib\tvmlck_kib\n' > "$OUT/samples.tsv"
  while :; do
    fetch > "$OUT/.m"
    local pin=0 shm=0 lck=0
    for pid in $(pgrep -f '(hot|pool)_loop.py'); do
      read -r p s l < <(awk '/^VmPin:/{p=$2} /^RssShmem:/{s=$2} /^VmLck:/{l=$2} END{print p+0, s+0, l+0}' "/proc/$pid/status" 2>/dev/null || echo "0 0 0")
      pin=$((pin + p)); shm=$((shm + s)); lck=$((lck + l))
    done
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date +%s.%N)" "$(cat "$OUT/phase")" \
      "$(metric hotpin_node_pinned_bytes "$OUT/.m")" "$(metric hotpin_node_leased_bytes "$OUT/.m")" \
      "$(metric hotpin_lease_clients "$OUT/.m")" "$pin" "$shm" "$lck" >> "$OUT/samples.tsv"
    sleep 0.1
  done
}
sampler &
SAMPLER=$!

# run CONFIG ROUND ROLE ARGS...: one program, its line appended to runs.jsonl.
run() {
  local config=$1 round=$2 role=$3; shift 3
  local args program=hot_loop
  if [ "$role" = dense ]; then args=$DENSE; else args=$SPARSE; program=$SECOND; fi
  local tag="$config.$round.$role"
  local began; began=$(date +%s.%N)
  local pre=()
  case $config in
    plain) ;;
    leases) pre=("$BIN/hotpin" run --lease-socket "$SOCK" --history "$OUT/$tag.hotpin" --report "$OUT/$tag" --) ;;
    share) pre=("$BIN/hotpin" run --lease-socket off --budget "$SHARE" --history "$OUT/$tag.hotpin" --report "$OUT/$tag" --) ;;
    unlimited) pre=("$BIN/hotpin" run --lease-socket off --history "$OUT/$tag.hotpin" --report "$OUT/$tag" --) ;;
  esac
  # shellcheck disable=SC2086
  timeout 120 "${pre[@]}" python3 "$HERE/$program.py" $args > "$OUT/$tag.out" 2> "$OUT/$tag.err"
  local status=$?
  local ended; ended=$(date +%s.%N)
  python3 - "$OUT" "$tag" "$config" "$round" "$role" "$status" "$began" "$ended" >> "$OUT/runs.jsonl" <<'PY'
import glob, json, sys
out, tag, config, round_, role, status, began, ended = sys.argv[1:]
line = {}
try:
    line = json.loads(open(f"{out}/{tag}.out").read().strip().splitlines()[-1])
except Exception as e:
    line = {"error": repr(e), "stderr": open(f"{out}/{tag}.err").read()[-2000:]}
line.update(config=config, round=int(round_), role=role, status=int(status),
            wall=float(ended) - float(began), started=float(began), ended=float(ended))
for path in glob.glob(f"{out}/{tag}.*.json"):
    report = json.load(open(path))
    line["leases"] = report.get("leases")
    c = report.get("counters", {})
    line["peak_promoted_bytes"] = c.get("peak_promoted_bytes")
    line["learned_pins"] = c.get("learned_pins")
    line["node_refusals"] = c.get("node_refusals")
    line["node_reclaims"] = c.get("node_reclaims")
    line["kept_pinned_bytes"] = c.get("kept_pinned_bytes")
    line["kept_without_lease"] = c.get("kept_without_lease")
    line["peak_pinned_bytes"] = c.get("peak_pinned_bytes")
print(json.dumps(line))
PY
}

for r in $(seq 1 "$ROUNDS"); do
  for config in plain leases share unlimited; do
    echo "$config" > "$OUT/phase"
    run "$config" "$r" dense &
    P1=$!
    sleep 0.5
    run "$config" "$r" sparse &
    P2=$!
    wait "$P1" "$P2"
    echo "round $r $config done" >&2
  done
done

# Kill: two dense programs under leases; the first killed with SIGKILL after 4 s.
echo kill > "$OUT/phase"
"$BIN/hotpin" run --lease-socket "$SOCK" --history "$OUT/kill.a.hotpin" -- python3 "$HERE/hot_loop.py" 100000 4 0 > /dev/null 2> "$OUT/kill.a.err" &
sleep 0.5
"$BIN/hotpin" run --lease-socket "$SOCK" --history "$OUT/kill.b.hotpin" --report "$OUT/kill.b" -- python3 "$HERE/hot_loop.py" 100000 4 0 > /dev/null 2> "$OUT/kill.b.err" &
B=$!
sleep 4
A=$(pgrep -f "hot_loop.py 100000" | head -1)
[ "$A" = "$B" ] && A=$(pgrep -f "hot_loop.py 100000" | tail -1)
fetch > "$OUT/kill.before.txt"
KILLED=$(date +%s.%N)
kill -9 "$A"
: > "$OUT/kill.tsv"
for _ in $(seq 1 60); do
  fetch > "$OUT/.k"
  printf '%s\t%s\t%s\t%s\n' "$(date +%s.%N)" "$(metric hotpin_lease_clients "$OUT/.k")" \
    "$(grep -E "^hotpin_pinned_bytes\{.*pid=\"$B\".*by=\"lease\"" "$OUT/.k" | awk '{print $2}')" \
    "$(grep -E "^hotpin_pinned_bytes\{.*pid=\"$A\".*by=\"lease\"" "$OUT/.k" | awk '{print $2}')" >> "$OUT/kill.tsv"
  sleep 0.05
done
# shellcheck disable=SC2046
kill -9 $(pgrep -f "hot_loop.py 100000") 2>/dev/null
wait "$B" 2>/dev/null
python3 - "$OUT" "$KILLED" "$A" "$B" > "$OUT/kill.json" <<'PY'
import json, sys
out, killed, a, b = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = [l.split("\t") for l in open(f"{out}/kill.tsv").read().splitlines()]
def first(pred):
    for r in rows:
        if pred(r):
            return round(float(r[0]) - killed, 3)
    return None
num = lambda s: float(s) if s.strip() else 0.0
print(json.dumps({
    "killed_pid": a, "other_pid": b,
    "clients_down_to_1_after_s": first(lambda r: num(r[1]) <= 1),
    "other_holds_256MiB_after_s": first(lambda r: num(r[2]) >= 256 * 2**20),
    "other_leased_before_bytes": num(rows[0][2]) if rows else None,
}))
PY
kill "$SAMPLER"
kill -TERM "$DAEMON"; wait "$DAEMON"
python3 "$HERE/summarize.py" "$OUT" | tee "$OUT/summary.md"
