#!/usr/bin/env bash
# bench/wrk.sh: new unique GitHub deliveries from Debian's wrk, the load
# generator a new user would reach for, beside bench/run.sh's own
# hookbox-loadgen. Each run starts a fresh server and database, posts a
# 1.8 KiB signed push with a unique X-GitHub-Delivery per request (one
# body, so one signature: GitHub signs the body only) over CONNECTIONS
# connections for DURATION seconds, and reports requests/s, p50, p99 and
# p99.9 (from wrk's own histogram, in its done() hook), non-2xx answers,
# and the rows stored, which must equal the 2xx answers (plus at most one
# request per connection that wrk stopped before reading its answer).
#
#   bench/wrk.sh                         # target/release/hookbox, 3 runs
#   bench/wrk.sh OLD_BINARY NEW_BINARY   # side by side, runs interleaved
#   RUNS=5 DURATION=20 DURABILITY=normal bench/wrk.sh
#   SEARCH=off bench/wrk.sh              # with [search] enabled = false
#   IDS=sequential bench/wrk.sh          # ids in arrival order (the old default)
#
# Delivery ids are GUID-shaped and land at random places in the unique
# index, as GitHub's do (IDS=random, the default). IDS=sequential numbers
# them in arrival order, so every insert goes to the index's last page:
# what this script did until 2026-12-01, and 25 % faster on the same
# machine (docs/src/benchmark.md, "Random keys").
#
# Needs wrk (apt-get install wrk) and python3 (the signature and the row
# count). Server and wrk share the machine's cores, as they would on a
# small VPS with the load generator beside it.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="${RUNS:-3}"
DURATION="${DURATION:-10}"
CONNECTIONS="${CONNECTIONS:-64}"
DURABILITY="${DURABILITY:-full}"
SEARCH="${SEARCH:-on}"
IDS="${IDS:-random}"
SECRET="bench-secret-0123456789"

command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 2; }
if [ "$#" -eq 0 ]; then
    cargo build --release --quiet -p hookbox --manifest-path "$root/Cargo.toml"
    set -- "$root/target/release/hookbox"
fi

work="$(mktemp -d)"
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$work"' EXIT

# The script: one body and its signature, a unique delivery id per request,
# and the percentiles wrk's --latency table leaves out.
case "$IDS" in random | sequential) ;; *) echo "IDS is random or sequential, not $IDS" >&2; exit 2 ;; esac
python3 "$root/bench/push_lua.py" "$SECRET" "$IDS" >"$work/push.lua"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# One run of binary $1: prints "requests/s p50 p99 p99.9 bad rows requests".
run_once() {
    local bin="$1" dir port admin
    # The previous run's database was just deleted: on a file system
    # mounted with `discard` its blocks are trimmed at the next journal
    # commit, which held this run's first fsyncs for up to a second.
    sync
    sleep 2
    dir="$(mktemp -d -p "$work")"
    port="$(free_port)"
    admin="$(free_port)"
    cat >"$dir/hookbox.toml" <<EOF
[server]
listen = "127.0.0.1:$port"
admin_listen = "127.0.0.1:$admin"
database = "$dir/hookbox.db"
durability = "$DURABILITY"
[admin]
token = "admin-token-0123456789abcdef"
[[sources]]
name = "github"
kind = "github"
secrets = ["$SECRET"]
EOF
    if [ "$SEARCH" = off ]; then
        printf '[search]\nenabled = false\n' >>"$dir/hookbox.toml"
    fi
    "$bin" serve --config "$dir/hookbox.toml" >"$dir/server.log" 2>&1 &
    local pid=$!
    for _ in $(seq 200); do
        curl -sf "http://127.0.0.1:$admin/readyz" >/dev/null 2>&1 && break
        sleep 0.05
    done
    local out
    out="$(wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" -s "$work/push.lua" "http://127.0.0.1:$port/hooks/github" | grep '^RESULT')"
    kill -TERM "$pid"
    wait "$pid" || true
    local rows
    rows="$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT count(*) FROM events").fetchone()[0])' "$dir/hookbox.db")"
    # RESULT requests rps p50 p99 p999 bad
    set -- $out
    echo "$3 $4 $5 $6 $7 $rows $2"
    rm -rf "$dir"
}

echo "== wrk: $CONNECTIONS connections, ${DURATION}s, durability=$DURABILITY, search=$SEARCH, ids=$IDS, $RUNS runs per binary, $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
declare -A lines
failed=0
for run in $(seq "$RUNS"); do
    for bin in "$@"; do
        line="$(run_once "$bin")"
        read -r rps p50 p99 p999 bad rows requests <<<"$line"
        ok=$((requests - bad))
        status=OK
        # wrk stops with up to one request per connection unanswered; the
        # server stored those too.
        if [ "$bad" -ne 0 ] || [ "$rows" -lt "$ok" ] || [ "$rows" -gt $((ok + CONNECTIONS)) ]; then
            status=FAIL
            failed=1
        fi
        printf '%s run %d: %s req/s  p50 %s ms  p99 %s ms  p99.9 %s ms  non-2xx/errors %s  rows %s (2xx %s) %s\n' \
            "$bin" "$run" "$rps" "$p50" "$p99" "$p999" "$bad" "$rows" "$ok" "$status"
        lines[$bin]+="$rps $p50 $p99 $p999"$'\n'
    done
done

echo "== medians"
for bin in "$@"; do
    printf '%s\n' "${lines[$bin]}" | python3 -c '
import statistics, sys
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
cols = list(zip(*rows))
m = [statistics.median(c) for c in cols]
print("%s: %.0f req/s  p50 %.2f ms  p99 %.2f ms  p99.9 %.2f ms" % (sys.argv[1], *m))' "$bin"
done
exit "$failed"
