#!/usr/bin/env bash
# The hookbox benchmark, end to end: builds release, runs each scenario RUNS
# times against a fresh server and database, prints every run and the median
# of each figure.
#
#   bench/run.sh                       # 3 runs of each scenario, 10 s each
#   RUNS=5 DURATION=20 bench/run.sh    # more, longer runs
#   DURABILITY=normal bench/run.sh     # server.durability = "normal"
#   bench/run.sh --threads 2           # extra arguments go to every hookbox-loadgen run
#   SCENARIOS="deliver deliver2 deliver_idle" bench/run.sh   # only the delivery scenarios
#
# Scenarios: new (unique ids), dup90 / dupNN (NN % resent ids), deliver (as
# new, with a url destination answering 204 at once: delivered/s, receipt-to-
# downstream latency, backlog drain after the ingest stops), deliver2 (as
# deliver, with two [[sources.deliver]] destinations: `a` takes every event,
# `b` a filter that takes half; the delivery figures per destination),
# deliver_idle (one delivery every 20 ms on one connection: receipt-to-
# downstream when idle).
#
# Environment: RUNS (3), DURATION seconds (10), WARMUP seconds (1),
# CONNECTIONS (64), DURABILITY (full), DRAIN_TIMEOUT seconds (60),
# SCENARIOS ("new dup90 deliver deliver2 deliver_idle").
# ATTACK=1 also runs hookbox-attack RUNS times (valid p50/p99 and the
# server's peak RSS during slowloris, 10k idle connections, idle uploads
# declaring the whole body budget and a duplicate storm; medians at the
# end), with the fd limit raised to the hard one.
# Exits non-zero when any run fails its checks (row count, exit status,
# answers; for deliver*: every row delivered, every 202 seen downstream,
# signatures valid, backlog drained within DRAIN_TIMEOUT; for deliver2, per
# destination: exactly the ids its filter takes, downstream and in the
# database).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

RUNS="${RUNS:-3}"
DURATION="${DURATION:-10}"
WARMUP="${WARMUP:-1}"
CONNECTIONS="${CONNECTIONS:-64}"
DURABILITY="${DURABILITY:-full}"
DRAIN_TIMEOUT="${DRAIN_TIMEOUT:-60}"
SCENARIOS="${SCENARIOS:-new dup90 deliver deliver2 deliver_idle}"

echo "== machine"
echo "cpus:   $(nproc)"
echo "cpu:    $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "kernel: $(uname -srm)"
echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
echo "rustc:  $(rustc --version)"
echo "runs=$RUNS duration=${DURATION}s warmup=${WARMUP}s connections=$CONNECTIONS durability=$DURABILITY drain_timeout=${DRAIN_TIMEOUT}s"
echo

echo "== build"
cargo build --release -p hookbox -p hookbox-bench
echo

loadgen="$root/target/release/hookbox-loadgen"
outdir="$root/target/bench"
mkdir -p "$outdir"
results="$outdir/results-$(date +%Y%m%d-%H%M%S).jsonl"
: >"$results"

failed=0
for scenario in $SCENARIOS; do
    extra=()
    case "$scenario" in
        new) dup=0 ;;
        dup90) dup=0.9 ;;
        dup[0-9]*) dup="$(awk -v p="${scenario#dup}" 'BEGIN { print p / 100 }')" ;;
        deliver) dup=0; extra=(--deliver --drain-timeout "$DRAIN_TIMEOUT") ;;
        deliver2) dup=0; extra=(--deliver --routes --drain-timeout "$DRAIN_TIMEOUT") ;;
        deliver_idle) dup=0; extra=(--deliver --idle --drain-timeout "$DRAIN_TIMEOUT") ;;
        *) echo "unknown scenario: $scenario (use new, dup90, dupNN, deliver, deliver2 or deliver_idle)" >&2; exit 2 ;;
    esac
    for run in $(seq 1 "$RUNS"); do
        echo "== $scenario run $run/$RUNS"
        status=0
        out="$("$loadgen" --scenario "$scenario" --duplicates "$dup" \
            --connections "$CONNECTIONS" --duration "$DURATION" --warmup "$WARMUP" \
            --durability "$DURABILITY" --hookbox "$root/target/release/hookbox" \
            ${extra[@]+"${extra[@]}"} "$@")" || status=$?
        printf '%s\n' "$out" | grep -v '^{' || true
        printf '%s\n' "$out" | grep '^{' >>"$results" || true
        if [ "$status" -ne 0 ]; then
            echo "!! $scenario run $run failed (exit $status)"
            failed=1
        fi
        echo
    done
done

echo "== results ($results)"
if command -v python3 >/dev/null 2>&1; then
    python3 - "$results" <<'PY'
import json, statistics, sys

# (key, label, decimals)
FIGURES = [
    ("accepted_per_sec", "202/s", 0),
    ("duplicates_per_sec", "200/s", 0),
    ("requests_per_sec", "req/s", 0),
    ("p50_ms", "p50 ms", 2),
    ("p99_ms", "p99 ms", 2),
    ("p999_ms", "p99.9 ms", 2),
    ("errors", "errors", 0),
    ("status_503", "503s", 0),
    ("server_cpu_pct", "server CPU %", 0),
    ("loadgen_cpu_pct", "loadgen CPU %", 0),
    ("peak_rss_mib", "peak RSS MiB", 1),
    ("idle_rss_mib", "idle RSS MiB", 1),
    ("startup_ms", "startup ms", 1),
    ("shutdown_ms", "shutdown ms", 0),
    ("rows", "rows", 0),
    ("rows_match", "rows match", 0),
]
# Shown only for runs that have them (--deliver).
DELIVER_FIGURES = [
    ("delivered_per_sec", "delivered/s", 0),
    ("recv_to_downstream_p50_ms", "recv->downstream p50 ms", 2),
    ("recv_to_downstream_p99_ms", "recv->downstream p99 ms", 2),
    ("recv_to_downstream_max_ms", "recv->downstream max ms", 2),
    ("backlog_at_ingest_end", "backlog at ingest end", 0),
    ("drain_secs", "drain s", 2),
    ("drain_per_sec", "drain delivered/s", 0),
    ("backlog_remaining", "backlog left at cap", 0),
    ("rows_undelivered", "rows not delivered", 0),
    ("downstream_missing", "202s never delivered", 0),
    ("downstream_duplicates", "downstream duplicates", 0),
    ("bad_signatures", "bad signatures", 0),
    ("attempts_retry", "failed attempts", 0),
    ("server_log_warnings", "server WARN/ERROR lines", 0),
]
# deliver2: these per destination, keyed "<name>.<key>" (see "destinations").
LANE_FIGURES = [
    ("delivered_per_sec", "delivered/s", 0),
    ("recv_to_downstream_p50_ms", "recv->downstream p50 ms", 2),
    ("recv_to_downstream_p99_ms", "recv->downstream p99 ms", 2),
    ("recv_to_downstream_max_ms", "recv->downstream max ms", 2),
    ("backlog_at_ingest_end", "backlog at ingest end", 0),
    ("drain_secs", "drain s", 2),
    ("drain_per_sec", "drain delivered/s", 0),
    ("backlog_remaining", "backlog left at cap", 0),
    ("expected", "ids its filter takes", 0),
    ("downstream_missing", "202s never delivered", 0),
    ("downstream_extra", "delivered, filter excludes", 0),
    ("downstream_duplicates", "downstream duplicates", 0),
    ("bad_signatures", "bad signatures", 0),
    ("deliveries_undelivered", "deliveries not delivered", 0),
    ("attempts_retry", "failed attempts", 0),
]
# deliver2: these once per run.
ROUTES_FIGURES = [
    ("rows_undelivered", "rows not delivered", 0),
    ("downstream_stray", "requests to no destination", 0),
    ("deliveries_other_destinations", "deliveries elsewhere", 0),
    ("attempts_retry", "failed attempts (all)", 0),
    ("server_log_warnings", "server WARN/ERROR lines", 0),
]
DECIMALS = {key: d for key, _, d in FIGURES + DELIVER_FIGURES + LANE_FIGURES}

runs = {}
with open(sys.argv[1]) as f:
    for line in f:
        line = line.strip()
        if line:
            r = json.loads(line)
            runs.setdefault(r["scenario"], []).append(r)

def fmt(v, decimals=0):
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if v is None:
        return "-"
    return f"{v:.{decimals}f}"

for scenario, rs in runs.items():
    head = ["figure"] + [f"run {i + 1}" for i in range(len(rs))] + ["median"]
    rows = []
    figures = FIGURES + [f for f in DELIVER_FIGURES if any(f[0] in r for r in rs)]
    lanes = rs[0].get("destinations") or []
    if lanes:
        figures = FIGURES + [(f"{lane}.{key}", f"{lane}: {label}", d)
                             for lane in lanes for key, label, d in LANE_FIGURES]
        figures += ROUTES_FIGURES
    for key, label, decimals in figures:
        vals = [r.get(key) for r in rs]
        if key == "rows_match":
            med = all(vals)
        else:
            nums = [v for v in vals if isinstance(v, (int, float))]
            med = statistics.median(nums) if nums else None
        rows.append([label] + [fmt(v, decimals) for v in vals] + [fmt(med, decimals)])
    widths = [max(len(row[i]) for row in [head] + rows) for i in range(len(head))]
    print(f"-- {scenario}: {rs[0]['connections']} connections, {rs[0]['duration']} s, "
          f"durability={rs[0].get('durability')}")
    for row in [head] + rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
    print()

print("-- medians")
keys = ["accepted_per_sec", "duplicates_per_sec", "requests_per_sec", "p50_ms", "p99_ms",
        "p999_ms", "peak_rss_mib", "idle_rss_mib", "startup_ms"]
head = ["scenario"] + keys
table = [head]
for scenario, rs in runs.items():
    table.append([scenario] + [fmt(statistics.median([r[k] for r in rs]), DECIMALS[k]) for k in keys])
widths = [max(len(row[i]) for row in table) for i in range(len(head))]
for row in table:
    print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))

# Delivery scenarios: their own figures, one row per destination (deliver2:
# "deliver2 a", "deliver2 b"). A run whose backlog did not drain has no
# drain_secs; the median is over the runs that have one, and "drained" says
# how many did. "extra" (deliveries a filter excludes) is deliver2's only.
deliver = {s: rs for s, rs in runs.items()
           if any("delivered_per_sec" in r or "destinations" in r for r in rs)}
if deliver:
    print()
    print("-- delivery medians")
    keys = ["delivered_per_sec", "recv_to_downstream_p50_ms", "recv_to_downstream_p99_ms",
            "drain_secs", "drain_per_sec", "backlog_remaining", "rows_undelivered",
            "downstream_missing", "downstream_extra", "downstream_duplicates"]
    head = ["scenario"] + keys + ["drained"]
    table = [head]
    for scenario, rs in deliver.items():
        # rows_undelivered is the run's (events), every other key the lane's.
        lanes = rs[0].get("destinations") or [None]
        for lane in lanes:
            def get(r, k):
                return r.get(f"{lane}.{k}" if lane and k != "rows_undelivered" else k)
            row = [f"{scenario} {lane}" if lane else scenario]
            for k in keys:
                nums = [get(r, k) for r in rs if isinstance(get(r, k), (int, float))]
                row.append(fmt(statistics.median(nums) if nums else None, DECIMALS[k]))
            row.append(f"{sum(1 for r in rs if get(r, 'drain_secs') is not None)}/{len(rs)}")
            table.append(row)
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
PY
else
    echo "(python3 not found: raw JSON lines follow)"
    cat "$results"
fi

if [ "${ATTACK:-0}" = 1 ]; then
    echo
    echo "== attack: valid deliveries while hookbox is attacked"
    ulimit -n "$(ulimit -Hn)" || true
    "$root/target/release/hookbox-attack" --hookbox "$root/target/release/hookbox" \
        --runs "$RUNS" || failed=1
fi

if [ "$failed" -ne 0 ]; then
    echo
    echo "!! at least one run failed its checks: see the messages above"
    exit 1
fi
