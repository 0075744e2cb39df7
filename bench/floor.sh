#!/usr/bin/env bash
# bench/floor.sh: what this machine allows any webhook receiver, measured
# without hookbox (bench/src/floor), so hookbox's figures from
# bench/run.sh and bench/wrk.sh can be read against the machine's:
#
#   disk   appends fsynced one by one, at 4 KiB to 1 MiB: how fast the
#          disk makes bytes durable;
#   store  the least a durable SQLite inbox does per event (a unique
#          (source, delivery_id) key, group commit, WAL fsync and passive
#          checkpoints on threads of their own, no HTTP), with random
#          GUID-shaped ids as GitHub sends and with sequential ones;
#   http   a server that reads each body and answers 202, nothing else,
#          driven by wrk as bench/wrk.sh drives hookbox (64 connections,
#          the same script, server and wrk sharing the cores).
#
#   bench/floor.sh                 # 3 runs of each, medians
#   RUNS=5 DURATION=20 bench/floor.sh
#
# The database and scratch files go to TMPDIR (default /tmp): point it at
# the file system hookbox's database lives on. Needs python3; the http
# part needs wrk (apt-get install wrk) and is left out without it.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="${RUNS:-3}"
DURATION="${DURATION:-10}"
CONNECTIONS="${CONNECTIONS:-64}"

cargo build --release --quiet -p hookbox-bench --bin hookbox-floor --manifest-path "$root/Cargo.toml"
floor="$root/target/release/hookbox-floor"
work="$(mktemp -d)"
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$work"' EXIT

median() { python3 -c 'import statistics,sys; print("%.0f" % statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

echo "== floor: $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), scratch on $(df --output=source "$work" | tail -1) ($(findmnt -no FSTYPE -T "$work"))"
"$floor" disk --dir "$work" | grep -v '^{'

for ids in random sequential; do
    rates=()
    for run in $(seq "$RUNS"); do
        # A deleted database's blocks are trimmed at the next journal
        # commit on a file system mounted with `discard` (see bench/wrk.sh).
        sync
        sleep 1
        TIMEFORMAT='%R %U %S'
        { time "$floor" store --dir "$work" --ids "$ids" --seconds "$DURATION" >"$work/store.out"; } 2>"$work/store.time"
        out="$(cat "$work/store.out")"
        cores="$(awk '{printf "%.2f", ($2 + $3) / $1}' "$work/store.time")"
        echo "run $run: $(head -1 <<<"$out"), $cores cores"
        rates+=("$(field "$(tail -1 <<<"$out")" events_per_sec)")
    done
    echo "store, $ids ids: median $(median "${rates[@]}") durable events/s"
done

if ! command -v wrk >/dev/null; then
    echo "http: left out, wrk is not installed (apt-get install wrk)"
    exit 0
fi
python3 "$root/bench/push_lua.py" floor-has-no-secret random >"$work/push.lua"
rates=() p99s=()
for run in $(seq "$RUNS"); do
    "$floor" http --listen 127.0.0.1:0 >"$work/http.out" &
    pid=$!
    for _ in $(seq 100); do
        grep -q '^listening on ' "$work/http.out" 2>/dev/null && break
        sleep 0.05
    done
    addr="$(sed -n 's/^listening on //p' "$work/http.out")"
    cpu0="$(awk '{print $14 + $15}' "/proc/$pid/stat")"
    TIMEFORMAT='%R %U %S'
    { time wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" -s "$work/push.lua" "http://$addr/hooks/github" >"$work/wrk.out"; } 2>"$work/wrk.time"
    set -- $(grep '^RESULT' "$work/wrk.out")
    cpu1="$(awk '{print $14 + $15}' "/proc/$pid/stat")"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    # RESULT requests req/s p50 p99 p99.9 errors
    cores="$(python3 -c 'import os,sys; print("%.2f" % ((int(sys.argv[2]) - int(sys.argv[1])) / os.sysconf("SC_CLK_TCK") / float(sys.argv[3])))' "$cpu0" "$cpu1" "$DURATION")"
    wrk_cores="$(awk '{printf "%.2f", ($2 + $3) / $1}' "$work/wrk.time")"
    echo "run $run: http: $3 req/s  p50 $4 ms  p99 $5 ms  p99.9 $6 ms  errors $7  server used $cores cores, wrk $wrk_cores"
    rates+=("$3") p99s+=("$5")
done
echo "http: median $(median "${rates[@]}") req/s, p99 $(python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "${p99s[@]}") ms"
