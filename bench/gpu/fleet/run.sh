#!/usr/bin/env bash
# Histories shared through an S3-compatible store, on the GPU machine (#29). moto's S3
# server (installed offline from WHEELS: `pip download 'moto[s3]' flask flask-cors`) on
# 127.0.0.1 stands for the fleet's store. "Node A" and "node B" are two homes (state and cache
# apart) on this machine:
#   node A: `hotpin run --fleet URL` of torch_loop.py twice: the first learns, the second puts
#           what it learned in the store (then starts from it).
#   node B: ROUNDS rounds, interleaved:
#     fleet   hotpin run --mode use --fleet URL   (node A's history, fetched from the store)
#     local   hotpin run --mode use --history FILE (the same history, a local file)
#     plain   the program as written
# Lines in $OUT/fleet.jsonl: the program's JSON line (it checks its results), config, round.
# Usage: BIN=dir WHEELS=dir OUT=dir bash bench/gpu/fleet/run.sh ROUNDS
set -u
BIN=$(cd "${BIN:-target/release}" && pwd)
WHEELS=$(cd "${WHEELS:-.device/wheels}" && pwd)
OUT=${OUT:-/tmp/hotpin-fleet}
ROUNDS=${1:-3}
PORT=${PORT:-5077}
HERE=$(cd "$(dirname "$0")" && pwd)
PROGRAM="$HERE/../online/torch_loop.py"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
python3 -m venv "$OUT/venv" && "$OUT/venv/bin/pip" install -q --no-index --find-links "$WHEELS" 'moto[s3]' flask flask-cors || exit 1
"$OUT/venv/bin/moto_server" -H 127.0.0.1 -p "$PORT" > "$OUT/moto.log" 2>&1 &
MOTO=$!
for _ in $(seq 1 50); do curl -s "127.0.0.1:$PORT" > /dev/null && break; sleep 0.2; done
curl -s -X PUT "127.0.0.1:$PORT/histories" > /dev/null
export AWS_ENDPOINT_URL="http://127.0.0.1:$PORT" AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_DEFAULT_REGION=us-east-1
unset XDG_STATE_HOME XDG_CACHE_HOME
URL=s3://histories/fleet
: > "$OUT/fleet.jsonl"
line() { # config round file
  python3 -c "import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); d.update(config=sys.argv[2], round=int(sys.argv[3])); print(json.dumps(d))" "$3" "$1" "$2" >> "$OUT/fleet.jsonl" \
    || echo "{\"config\": \"$1\", \"round\": $2, \"error\": \"no line\"}" >> "$OUT/fleet.jsonl"
}
for i in 1 2; do
  HOME="$OUT/node-a" "$BIN/hotpin" run --lease-socket off --fleet "$URL" -- python3 "$PROGRAM" > "$OUT/a$i.out" 2> "$OUT/a$i.err"
  line node-a-$i 0 "$OUT/a$i.out"
  grep "hotpin:" "$OUT/a$i.err"
done
cp "$OUT"/node-a/.local/state/hotpin/*.hotpin "$OUT/local.hotpin" || { echo "run.sh: node A learned nothing" >&2; exit 1; }
for r in $(seq 1 "$ROUNDS"); do
  HOME="$OUT/node-b" "$BIN/hotpin" run --lease-socket off --mode use --fleet "$URL" -- python3 "$PROGRAM" > "$OUT/fleet.$r.out" 2> "$OUT/fleet.$r.err"
  line fleet "$r" "$OUT/fleet.$r.out"
  [ "$r" = 1 ] && grep "hotpin:" "$OUT/fleet.$r.err"
  HOME="$OUT/node-b" "$BIN/hotpin" run --lease-socket off --mode use --history "$OUT/local.hotpin" -- python3 "$PROGRAM" > "$OUT/local.$r.out" 2> "$OUT/local.$r.err"
  line local "$r" "$OUT/local.$r.out"
  python3 "$PROGRAM" > "$OUT/plain.$r.out" 2> "$OUT/plain.$r.err"
  line plain "$r" "$OUT/plain.$r.out"
done
kill "$MOTO"
python3 - "$OUT/fleet.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| config | seconds (median) | runs | mismatches |")
print("| --- | --- | --- | --- |")
for config in ["node-a-1", "node-a-2", "fleet", "local", "plain"]:
    sel = [r for r in rows if r["config"] == config and "seconds" in r]
    bad = sum(r.get("mismatches", 1) for r in rows if r["config"] == config)
    med = f"{statistics.median(r['seconds'] for r in sel):.3f}" if sel else "-"
    print(f"| {config} | {med} | {len(sel)} | {bad} |")
PY
