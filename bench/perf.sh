#!/usr/bin/env bash
# bench/perf.sh: the four figures of Perf II, each beside the floor measured
# in the same sitting (bench/floor.sh's store with random ids), so they hold
# on whatever machine runs them.
#
#   bench/perf.sh                   # 3 sittings, medians
#   SITTINGS=5 DURATION=20 bench/perf.sh
#   BASELINE=/path/to/old/hookbox bench/perf.sh   # that binary too, each run beside this tree's
#
# Each sitting measures, in this order:
#
#   floor    hookbox-floor store --ids random: durable events/s of a bare
#            SQLite inbox (F);
#   ingest   hookbox, 64 connections back to back, random GUID ids, search
#            on, durability full: accepted/s / F (target >= 0.80) and the
#            server's CPU per stored event (target <= 70 us);
#   tail     64 paced connections offering F/2 events/s together: p99
#            (<= 10 ms), p99.9 (<= 25 ms), accepted / offered (>= 0.90);
#   deliver  paced at F/4, one url destination to a local 204 endpoint:
#            delivered/s during the ingest / accepted/s (>= 0.95) and
#            receipt->downstream p99 (<= 250 ms);
#   deliver2 the same load with two destinations (one filtered to half):
#            its accepted/s / deliver's (>= 0.90).
#
# Environment: SITTINGS (3), DURATION seconds per run (10), CONNECTIONS
# (64), DRAIN_TIMEOUT seconds (120), BASELINE (a hookbox binary run beside
# this tree's in every sitting, labelled "@baseline"). Every run's JSON
# goes to target/bench/perf-<time>.jsonl. Exits non-zero when a run fails
# its own checks (rows, answers, deliveries); a missed target is reported,
# not an error.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

SITTINGS="${SITTINGS:-3}"
DURATION="${DURATION:-10}"
CONNECTIONS="${CONNECTIONS:-64}"
DRAIN_TIMEOUT="${DRAIN_TIMEOUT:-120}"

echo "== machine: $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(uname -sr)"
echo "sittings=$SITTINGS duration=${DURATION}s connections=$CONNECTIONS"
cargo build --release --quiet -p hookbox -p hookbox-bench
loadgen="$root/target/release/hookbox-loadgen"
floor="$root/target/release/hookbox-floor"
mkdir -p target/bench
results="$root/target/bench/perf-$(date +%Y%m%d-%H%M%S).jsonl"
: >"$results"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

sides=("=$root/target/release/hookbox")
if [ -n "${BASELINE:-}" ]; then
    sides=("@baseline=$BASELINE" "${sides[@]}")
fi

failed=0
# run SITTING SCENARIO BINARY [loadgen arguments...]: one run, its JSON
# line tagged with the sitting.
run() {
    local sitting="$1" scenario="$2" binary="$3"
    shift 3
    echo "-- sitting $sitting: $scenario (load average $(cut -d' ' -f1 /proc/loadavg))"
    local out status=0
    out="$("$loadgen" --scenario "$scenario" --duration "$DURATION" --hookbox "$binary" "$@")" || status=$?
    printf '%s\n' "$out" | grep -v '^{' || true
    printf '%s\n' "$out" | grep '^{' | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    r["sitting"] = int(sys.argv[1])
    print(json.dumps(r))' "$sitting" >>"$results" || true
    if [ "$status" -ne 0 ]; then
        echo "!! $scenario in sitting $sitting failed its checks (exit $status)"
        failed=1
    fi
}

for sitting in $(seq "$SITTINGS"); do
    echo
    echo "== sitting $sitting/$SITTINGS"
    # A deleted database's blocks are trimmed at the next journal commit on
    # a file system mounted with `discard` (see bench/wrk.sh).
    sync
    sleep 1
    "$floor" store --dir "$work" --ids random --seconds "$DURATION" >"$work/floor.out"
    head -1 "$work/floor.out"
    f="$(tail -1 "$work/floor.out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["events_per_sec"])')"
    echo "{\"scenario\":\"floor\",\"sitting\":$sitting,\"events_per_sec\":$f}" >>"$results"
    # Paced: each connection starts a request every CONNECTIONS * 1000 / rate ms.
    half="$(python3 -c "print($CONNECTIONS * 1000 / ($f / 2))")"
    quarter="$(python3 -c "print($CONNECTIONS * 1000 / ($f / 4))")"
    for side in "${sides[@]}"; do
        tag="${side%%=*}"
        binary="${side#*=}"
        run "$sitting" "ingest$tag" "$binary" --connections "$CONNECTIONS"
        run "$sitting" "tail$tag" "$binary" --connections "$CONNECTIONS" --pace-ms "$half"
        run "$sitting" "deliver$tag" "$binary" --connections "$CONNECTIONS" --pace-ms "$quarter" \
            --deliver --drain-timeout "$DRAIN_TIMEOUT"
        run "$sitting" "deliver2$tag" "$binary" --connections "$CONNECTIONS" --pace-ms "$quarter" \
            --deliver --routes --drain-timeout "$DRAIN_TIMEOUT"
    done
done

echo
echo "== Perf II figures ($results)"
python3 - "$results" <<'PY'
import json, statistics, sys

runs = {}
for line in open(sys.argv[1]):
    if line.strip():
        r = json.loads(line)
        runs[(r["scenario"], r["sitting"])] = r

sittings = sorted({s for _, s in runs})
tags = sorted({sc[len("ingest"):] for sc, _ in runs if sc.startswith("ingest")})

def get(scenario, sitting, key):
    v = runs.get((scenario, sitting), {}).get(key)
    return v if isinstance(v, (int, float)) else None

def ratio(a, b):
    return a / b if a is not None and b else None

# (label, target, comparison, per-sitting function of (tag, sitting), format)
FIGURES = [
    ("1. ingest / floor", 0.80, ">=",
     lambda t, s: ratio(get("ingest" + t, s, "accepted_per_sec"), get("floor", s, "events_per_sec")), "{:.2f}"),
    ("2. server CPU us per event", 70, "<=",
     lambda t, s: get("ingest" + t, s, "cpu_us_per_event"), "{:.0f}"),
    ("3. tail at F/2: p99 ms", 10, "<=", lambda t, s: get("tail" + t, s, "p99_ms"), "{:.1f}"),
    ("3. tail at F/2: p99.9 ms", 25, "<=", lambda t, s: get("tail" + t, s, "p999_ms"), "{:.1f}"),
    ("3. tail at F/2: accepted / offered", 0.90, ">=",
     lambda t, s: ratio(get("tail" + t, s, "accepted_per_sec"), get("floor", s, "events_per_sec") / 2), "{:.2f}"),
    ("4. delivered / accepted at F/4", 0.95, ">=",
     lambda t, s: ratio(get("deliver" + t, s, "delivered_per_sec"), get("deliver" + t, s, "accepted_per_sec")), "{:.2f}"),
    ("4. receipt->downstream p99 ms", 250, "<=",
     lambda t, s: get("deliver" + t, s, "recv_to_downstream_p99_ms"), "{:.0f}"),
    ("4. two destinations: ingest / one's", 0.90, ">=",
     lambda t, s: ratio(get("deliver2" + t, s, "accepted_per_sec"), get("deliver" + t, s, "accepted_per_sec")), "{:.2f}"),
]

def fmt(v, f):
    return "-" if v is None else f.format(v)

head = ["figure", "target"] + [f"sitting {s}" for s in sittings] + ["median", "met"]
for tag in tags:
    table = [head]
    floors = [get("floor", s, "events_per_sec") for s in sittings]
    table.append(["floor, store, random ids (F)", "-"] + [fmt(v, "{:.0f}/s") for v in floors]
                 + [fmt(statistics.median([v for v in floors if v]), "{:.0f}/s"), ""])
    for label, target, cmp, f, form in FIGURES:
        vals = [f(tag, s) for s in sittings]
        nums = [v for v in vals if v is not None]
        med = statistics.median(nums) if nums else None
        met = "-" if med is None else ("yes" if (med >= target if cmp == ">=" else med <= target) else "NO")
        table.append([label, f"{cmp} {target}"] + [fmt(v, form) for v in vals] + [fmt(med, form), met])
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    print(f"-- {'this tree' if not tag else tag[1:]}")
    for row in table:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
    print()
PY
exit "$failed"
