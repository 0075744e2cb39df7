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
#   PULL=1 bench/run.sh                # also the pull scenarios
#   SCENARIOS=pull_latency RUNS=1 bench/run.sh   # one of them
#   OUTAGE=1 bench/run.sh              # also the outage scenarios (minutes each)
#   BASELINE=/path/to/old/hookbox SCENARIOS="new deliver" bench/run.sh
#                                      # each run against that binary too, side by side
#   SCENARIOS="outage outage_before" RUNS=3 bench/run.sh   # only them
#   SCENARIOS="new wrk" bench/run.sh   # hookbox-loadgen and Debian's wrk on the same ingest
#   FLOOR=1 bench/run.sh               # first what the machine allows any receiver (bench/floor.sh)
#   BROKERS=1 SCENARIOS=deliver bench/run.sh   # deliver beside each broker kind
#   BROKERS=1 bench/run.sh --concurrency 4     # ... with that destination concurrency
#   PAUSED=1 BROKERS=1 SCENARIOS=deliver bench/run.sh   # the destination paused during
#                                      # the ingest, resumed after: the drain is its delivery rate alone,
#                                      # with the CPU hookbox (and the broker) spent per delivery in it
#   SCENARIOS=perf bench/run.sh        # Perf II's four figures beside the floor (bench/perf.sh)
#
# Scenarios: new (unique ids), new_nosearch (as new, with `[search] enabled
# = false`: ingest without the full-text index, to compare; not in the
# default list: SCENARIOS="new new_nosearch"), dup90 / dupNN (NN % resent
# ids), deliver (as
# new, with a url destination answering 204 at once: delivered/s, receipt-to-
# downstream latency, backlog drain after the ingest stops), deliver2 (as
# deliver, with two [[sources.deliver]] destinations: `a` takes every event,
# `b` a filter that takes half; the delivery figures per destination),
# deliver_idle (one delivery every 20 ms on one connection: receipt-to-
# downstream when idle), transform (as deliver, the destination with the
# cookbook's GitHub push -> Discord transform, the downstream checking that
# each body is that program's output for the push sent: what running every
# delivery through a transform process costs; compare its delivered/s
# and CPU us/event with deliver's), wrk (new unique GitHub deliveries from Debian's
# wrk instead of hookbox-loadgen, through bench/wrk.sh, so the two load
# generators cross-check; in the default list when wrk is installed, right
# after new; BASELINE is run beside it too), floor (bench/floor.sh: the
# disk, a bare durable SQLite store and a bare HTTP server, without
# hookbox, so its figures can be read against the machine's; opt-in with
# FLOOR=1, which runs it first, or name it in SCENARIOS).
#
# Broker scenarios (opt-in with BROKERS=1, or name them in SCENARIOS; they
# need nats-server, redis-server, rabbitmq-server and mosquitto):
# deliver_nats, deliver_redis, deliver_amqp, deliver_mqtt, each as deliver
# with the source's destination that broker kind instead of a url. The
# load generator starts the real server on a free loopback port in a temp
# dir (nats-server with JetStream and a file stream capturing hooks.>;
# redis-server with appendonly yes, appendfsync always; RabbitMQ with a
# durable topic exchange and a durable classic queue (version 2) bound
# to it; Mosquitto with a QoS 1 subscriber), and kills it at the end. Delivered/s (in the measured
# window) and the drain come from the database's delivered rows, sampled
# every 50 ms; the check: every row delivered and the broker holds exactly
# as many messages as rows were delivered.
#
# Pull scenarios (a `pull` destination on the source; opt-in with PULL=1,
# or name them in SCENARIOS): pull_latency (one consumer long-polls with
# max=10 wait=20s and acks, one event posted every 20 ms: 202 -> take
# answered p50/p99/max), pull_listen (PULL_EVENTS events stored, then the
# real `hookbox listen --once` forwards them to the local 204 downstream:
# events/s, each exactly once, all rows delivered), pull_listen_ingest (as
# deliver, with `hookbox listen` as the deliverer while PULL_INGEST_RATE
# events/s are posted over CONNECTIONS connections, then SIGINT),
# pull_idle (the server's CPU and RSS with no poll, then with PULL_POLLS
# long-polls held open for DURATION each; then events 20 ms apart while
# they wait; then SIGTERM with them still waiting).
#
# Outage scenarios (opt-in with OUTAGE=1, or name them in SCENARIOS): the
# source gets an order_key (OUTAGE_KEYS keys, 300) and one url destination
# at the local downstream, which answers 503 while OUTAGE_EVENTS (10,000)
# events are posted over OUTAGE_CONNECTIONS (8) connections and until
# OUTAGE_SECS (30) after the first post, then 204. outage: the breaker at
# its default 10 failures, breaker_probe OUTAGE_PROBE ("5s": hookbox's
# default is 30s, shortened to keep the run short) and rate RATE ("500/s").
# outage_before: breaker_failures = 0 and no rate, as hookbox was before
# either existed (each delivery waits out its own backoff, default base
# 30 s and cap 1 h; no rate is also the fastest it could deliver, and its
# peak shows the stampede); it runs OUTAGE_BEFORE_RUNS times (RUNS). Both
# wait up to OUTAGE_TIMEOUT (180) seconds after the switch. Figures, from
# what the downstream saw: attempts that reached the dead service, the
# first 2xx after the switch (the successful probe), all delivered (from
# that 2xx and from the switch; "not within N s" with how many were), the
# most requests in one second (sliding window and whole seconds from the
# switch) against the rate, per-key order, deliveries dead.
#
# BASELINE (a hookbox binary, say one built from main before a change):
# every run of every scenario is made against it first, labelled
# "<scenario>@baseline", then against this tree's build, so the medians
# table sets the two side by side on the same machine at the same time.
#
# Environment: RUNS (3), DURATION seconds (10), WARMUP seconds (1),
# CONNECTIONS (64), DURABILITY (full), DRAIN_TIMEOUT seconds (60),
# SCENARIOS ("new wrk dup90 deliver deliver2 deliver_idle"; no wrk
# when it is not installed), PULL (0; 1 adds
# "pull_latency pull_listen pull_listen_ingest pull_idle"), PULL_EVENTS
# (20000), PULL_POLLS (100), PULL_INGEST_RATE events/s (2000).
# ATTACK=1 also runs hookbox-attack RUNS times (valid p50/p99 and the
# server's peak RSS during slowloris, 10k idle connections, idle uploads
# declaring the whole body budget, a duplicate storm and a flood of forged
# deliveries; medians at the end), with the fd limit raised to the hard one.
# FORGED=1 runs only its baseline and forged phases, DURATION seconds each:
# valid p50/p99 alone, then beside the flood (which the server refuses and
# records in its bounded rejections table), and the table's size after it.
# Exits non-zero when any run fails its checks (row count, exit status,
# answers; for deliver*: every row delivered, every 202 seen downstream,
# signatures valid, backlog drained within DRAIN_TIMEOUT; for deliver2, per
# destination: exactly the ids its filter takes, downstream and in the
# database; for pull*: every event taken or forwarded exactly once, every
# row delivered, `hookbox listen` exited 0; for outage*: no delivery dead,
# per-key order kept, every event stored, signatures valid; for outage
# only: every event delivered and none pending, the backlog within 30 s of
# the first successful probe, no second above RATE plus 1 % and 2 requests
# (hookbox spaces the starts, the downstream counts arrivals, which trail
# them by a varying delay)).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

RUNS="${RUNS:-3}"
DURATION="${DURATION:-10}"
WARMUP="${WARMUP:-1}"
CONNECTIONS="${CONNECTIONS:-64}"
DURABILITY="${DURABILITY:-full}"
DRAIN_TIMEOUT="${DRAIN_TIMEOUT:-60}"
if command -v wrk >/dev/null; then
    SCENARIOS="${SCENARIOS:-new wrk dup90 deliver deliver2 deliver_idle}"
else
    SCENARIOS="${SCENARIOS:-new dup90 deliver deliver2 deliver_idle}"
fi
PULL_EVENTS="${PULL_EVENTS:-20000}"
PULL_POLLS="${PULL_POLLS:-100}"
PULL_INGEST_RATE="${PULL_INGEST_RATE:-2000}"
if [ "${FLOOR:-0}" = 1 ]; then
    SCENARIOS="floor $SCENARIOS"
fi
if [ "${PULL:-0}" = 1 ]; then
    SCENARIOS="$SCENARIOS pull_latency pull_listen pull_listen_ingest pull_idle"
fi
if [ "${BROKERS:-0}" = 1 ]; then
    SCENARIOS="$SCENARIOS deliver_nats deliver_redis deliver_amqp deliver_mqtt"
fi
if [ "${OUTAGE:-0}" = 1 ]; then
    SCENARIOS="$SCENARIOS outage outage_before"
fi
OUTAGE_EVENTS="${OUTAGE_EVENTS:-10000}"
OUTAGE_KEYS="${OUTAGE_KEYS:-300}"
OUTAGE_CONNECTIONS="${OUTAGE_CONNECTIONS:-8}"
OUTAGE_SECS="${OUTAGE_SECS:-30}"
OUTAGE_PROBE="${OUTAGE_PROBE:-5s}"
OUTAGE_TIMEOUT="${OUTAGE_TIMEOUT:-180}"
OUTAGE_BEFORE_RUNS="${OUTAGE_BEFORE_RUNS:-$RUNS}"
RATE="${RATE:-500/s}"

# The cookbook's GitHub push -> Discord recipe (docs/src/cookbook.md), and
# what it makes of bench/src/payload.rs's push: written out by hand.
DISCORD_PROGRAM='select(.ref == "refs/heads/main")
| {content: ("**\(.pusher.name)** pushed \(.commits | length) commit(s) to `\(.repository.full_name)`:\n"
    + ([.commits[] | "- \(.message | split("\n")[0]) (\(.id[0:7]))"] | join("\n")))}'
DISCORD_OUTPUT='{"content":"**octocat** pushed 1 commit(s) to `acme/shop`:\n- checkout: retry the payment intent lookup once before failing the order (59b20b8)"}'

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
    if [ "$scenario" = wrk ]; then
        # Its own script prints every run and the medians, with its checks.
        echo "== wrk"
        RUNS="$RUNS" DURATION="$DURATION" CONNECTIONS="$CONNECTIONS" DURABILITY="$DURABILITY" \
            bench/wrk.sh ${BASELINE:+"$BASELINE"} "$root/target/release/hookbox" || failed=1
        echo
        continue
    fi
    if [ "$scenario" = perf ]; then
        # Its own sittings: the floor, then Perf II's four figures beside it.
        echo "== perf"
        SITTINGS="$RUNS" DURATION="$DURATION" CONNECTIONS="$CONNECTIONS" DRAIN_TIMEOUT="$DRAIN_TIMEOUT" \
            bench/perf.sh || failed=1
        echo
        continue
    fi
    if [ "$scenario" = floor ]; then
        echo "== floor"
        RUNS="$RUNS" DURATION="$DURATION" CONNECTIONS="$CONNECTIONS" bench/floor.sh || failed=1
        echo
        continue
    fi
    extra=()
    case "$scenario" in
        new) dup=0 ;;
        new_nosearch) dup=0; extra=(--no-search) ;;
        dup90) dup=0.9 ;;
        dup[0-9]*) dup="$(awk -v p="${scenario#dup}" 'BEGIN { print p / 100 }')" ;;
        deliver) dup=0; extra=(--deliver --drain-timeout "$DRAIN_TIMEOUT") ;;
        deliver2) dup=0; extra=(--deliver --routes --drain-timeout "$DRAIN_TIMEOUT") ;;
        deliver_idle) dup=0; extra=(--deliver --idle --drain-timeout "$DRAIN_TIMEOUT") ;;
        deliver_nats|deliver_redis|deliver_amqp|deliver_mqtt)
            dup=0; extra=(--deliver --broker "${scenario#deliver_}" --drain-timeout "$DRAIN_TIMEOUT") ;;
        transform) dup=0; extra=(--deliver --transform "$DISCORD_PROGRAM" --expect-body "$DISCORD_OUTPUT" --drain-timeout "$DRAIN_TIMEOUT") ;;
        pull_latency) dup=0; extra=(--pull latency --drain-timeout "$DRAIN_TIMEOUT") ;;
        pull_listen) dup=0; extra=(--pull listen --events "$PULL_EVENTS" --drain-timeout "$DRAIN_TIMEOUT") ;;
        pull_listen_ingest)
            # Each connection paced so that together they offer PULL_INGEST_RATE/s.
            dup=0
            pace="$(awk -v c="$CONNECTIONS" -v r="$PULL_INGEST_RATE" 'BEGIN { print c * 1000 / r }')"
            extra=(--deliver --listen --pace-ms "$pace" --drain-timeout "$DRAIN_TIMEOUT") ;;
        pull_idle) dup=0; extra=(--pull idle --long-polls "$PULL_POLLS" --drain-timeout "$DRAIN_TIMEOUT") ;;
        outage|outage_before)
            dup=0
            outage=(--outage-events "$OUTAGE_EVENTS" --order-keys "$OUTAGE_KEYS"
                --outage-secs "$OUTAGE_SECS" --recovery-timeout "$OUTAGE_TIMEOUT")
            if [ "$scenario" = outage ]; then
                extra=(--outage after --rate "$RATE" --probe "$OUTAGE_PROBE" "${outage[@]}")
            else
                extra=(--outage before "${outage[@]}")
            fi ;;
        *) echo "unknown scenario: $scenario (use perf, new, new_nosearch, wrk, floor, dup90, dupNN, deliver, deliver2, deliver_idle, transform, deliver_nats, deliver_redis, deliver_amqp, deliver_mqtt, pull_latency, pull_listen, pull_listen_ingest, pull_idle, outage or outage_before)" >&2; exit 2 ;;
    esac
    # PAUSED=1: the destination holds the whole ingest as its backlog,
    # so the drain is the delivery rate with the machine to itself.
    case "$scenario" in
        deliver|deliver_nats|deliver_redis|deliver_amqp|deliver_mqtt|transform)
            if [ "${PAUSED:-0}" = 1 ]; then extra+=(--paused); fi ;;
    esac
    runs="$RUNS"
    connections="$CONNECTIONS"
    case "$scenario" in
        outage*) connections="$OUTAGE_CONNECTIONS" ;;
    esac
    if [ "$scenario" = outage_before ]; then
        runs="$OUTAGE_BEFORE_RUNS"
    fi
    # With BASELINE, each run of the scenario against that binary first
    # ("<scenario>@baseline"), then against this tree's: interleaved, so
    # both sides see the same machine.
    sides=("$scenario=$root/target/release/hookbox")
    if [ -n "${BASELINE:-}" ]; then
        sides=("$scenario@baseline=$BASELINE" "${sides[@]}")
    fi
    for run in $(seq 1 "$runs"); do
      for side in "${sides[@]}"; do
        label="${side%%=*}"
        binary="${side#*=}"
        echo "== $label run $run/$runs"
        case "$scenario" in
            outage*) echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)" ;;
        esac
        status=0
        out="$("$loadgen" --scenario "$label" --duplicates "$dup" \
            --connections "$connections" --duration "$DURATION" --warmup "$WARMUP" \
            --durability "$DURABILITY" --hookbox "$binary" \
            ${extra[@]+"${extra[@]}"} "$@")" || status=$?
        printf '%s\n' "$out" | grep -v '^{' || true
        printf '%s\n' "$out" | grep '^{' >>"$results" || true
        if [ "$status" -ne 0 ]; then
            echo "!! $label run $run failed (exit $status)"
            failed=1
        fi
        echo
      done
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
    ("cpu_us_per_event", "CPU us/event, server + children, to drain end", 1),
    ("loadgen_cpu_pct", "loadgen CPU %", 0),
    ("peak_rss_mib", "peak RSS MiB", 1),
    ("idle_rss_mib", "idle RSS MiB", 1),
    ("startup_ms", "startup ms", 1),
    ("shutdown_ms", "shutdown ms", 0),
    ("rows", "rows", 0),
    ("rows_match", "rows match", 0),
    ("index_lag_at_ingest_end", "events not yet indexed at ingest end", 0),
    ("index_bytes_per_event", "search index bytes/event", 0),
    ("db_bytes_per_event", "database bytes/event", 0),
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
    ("drain_server_us_per_delivery", "server CPU us/delivery in a paused drain", 1),
    ("drain_broker_us_per_delivery", "broker CPU us/delivery in a paused drain", 1),
    ("backlog_remaining", "backlog left at cap", 0),
    ("rows_undelivered", "rows not delivered", 0),
    ("downstream_missing", "202s never delivered", 0),
    ("downstream_duplicates", "downstream duplicates", 0),
    ("bad_signatures", "bad signatures", 0),
    ("attempts_retry", "failed attempts", 0),
    ("server_log_warnings", "server WARN/ERROR lines", 0),
    ("broker_held", "messages the broker holds", 0),
    ("broker_held_minus_delivered", "broker holds minus rows delivered", 0),
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

# Pull and outage scenarios have figures of their own: tabled at the end.
pull = {s: rs for s, rs in runs.items() if rs[0].get("kind") == "pull"}
outage = {s: rs for s, rs in runs.items() if rs[0].get("kind") == "outage"}
runs = {s: rs for s, rs in runs.items() if s not in pull and s not in outage}

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

if runs:
    print("-- medians")
    keys = ["accepted_per_sec", "duplicates_per_sec", "requests_per_sec", "p50_ms", "p99_ms",
            "p999_ms", "peak_rss_mib", "idle_rss_mib", "startup_ms", "db_bytes_per_event"]
    head = ["scenario"] + keys
    table = [head]
    for scenario, rs in runs.items():
        meds = [statistics.median(v) if v else None
                for v in ([r[k] for r in rs if isinstance(r.get(k), (int, float))] for k in keys)]
        table.append([scenario] + [fmt(m, DECIMALS[k]) for m, k in zip(meds, keys)])
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
    # Paused runs: what the drain cost hookbox (and the broker) per delivery.
    keys += [k for k in ("drain_server_us_per_delivery", "drain_broker_us_per_delivery")
             if any(k in r and r[k] is not None for rs in deliver.values() for r in rs)]
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

# Pull scenarios: every figure per run with its median, per scenario; then
# the headline figures against the Pull issue's targets.
PULL_FIGURES = {
    "latency": [
        ("accepted", "events posted", 0),
        ("handoff_p50_ms", "202 -> take answered p50 ms", 2),
        ("handoff_p99_ms", "202 -> take answered p99 ms", 2),
        ("handoff_max_ms", "202 -> take answered max ms", 2),
        ("handoff_samples", "samples", 0),
        ("taken_before_202", "answered before the 202", 0),
        ("takes", "takes answered", 0),
        ("taken_twice", "taken twice", 0),
        ("missing", "never taken", 0),
        ("stale", "stale acks", 0),
        ("consumer_errors", "consumer errors", 0),
        ("ingest_p50_ms", "their 202s p50 ms", 2),
        ("server_cpu_pct", "server CPU %", 1),
        ("rows_undelivered", "rows not delivered", 0),
        ("shutdown_ms", "shutdown ms", 0),
        ("server_log_warnings", "server WARN/ERROR lines", 0),
    ],
    "listen": [
        ("events", "events stored", 0),
        ("stored_per_sec", "stored/s", 0),
        ("listen_per_sec", "listen events/s", 0),
        ("listen_secs", "listen start to exit s", 2),
        ("arrival_span_per_sec", "first to last arrival /s", 0),
        ("downstream_duplicates", "downstream duplicates", 0),
        ("downstream_missing", "never forwarded", 0),
        ("bad_bodies", "bodies not as sent", 0),
        ("listen_lines_204", "listen lines saying 204", 0),
        ("listen_cpu_pct", "listen CPU %", 1),
        ("server_cpu_pct", "server CPU %", 1),
        ("peak_rss_mib", "server peak RSS MiB", 1),
        ("rows_undelivered", "rows not delivered", 0),
        ("server_log_warnings", "server WARN/ERROR lines", 0),
    ],
    "idle": [
        ("long_polls", "long-polls", 0),
        ("none_cpu_pct", "no poll: server CPU %", 2),
        ("held_cpu_pct", "polls waiting: server CPU %", 2),
        ("none_rss_mib", "no poll: RSS MiB", 2),
        ("held_rss_mib", "polls waiting: RSS MiB", 2),
        ("rss_delta_mib", "RSS delta MiB", 2),
        ("waiting_at_end", "waiting at the end", 0),
        ("reissued", "re-issued", 0),
        ("probe_events", "events while they wait", 0),
        ("probe_handoff_p50_ms", "202 -> take answered p50 ms", 2),
        ("probe_handoff_p99_ms", "202 -> take answered p99 ms", 2),
        ("probe_ingest_p50_ms", "their 202s p50 ms", 2),
        ("probe_cpu_pct", "server CPU % while they wait", 1),
        ("taken_twice", "taken twice", 0),
        ("missing", "never taken", 0),
        ("rows_undelivered", "rows not delivered", 0),
        ("shutdown_ms", "SIGTERM with polls waiting: exit ms", 0),
        ("server_log_warnings", "server WARN/ERROR lines", 0),
    ],
}
# (mode, key, label, target)
PULL_TARGETS = [
    ("latency", "handoff_p50_ms", "202 -> take answered p50 ms", "<= 50"),
    ("latency", "handoff_p99_ms", "202 -> take answered p99 ms", ""),
    ("listen", "listen_per_sec", "listen events/s", ">= 2000"),
    ("idle", "held_cpu_pct", "polls waiting: server CPU %", "not measurable"),
    ("idle", "rss_delta_mib", "polls waiting: RSS delta MiB", "< 5"),
]
PULL_DECIMALS = {key: d for figs in PULL_FIGURES.values() for key, _, d in figs}

def median_of(rs, key):
    nums = [r.get(key) for r in rs if isinstance(r.get(key), (int, float))]
    return statistics.median(nums) if nums else None

def print_table(table, text_columns=1):
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(c.ljust(w) if i < text_columns else c.rjust(w)
                        for i, (c, w) in enumerate(zip(row, widths))).rstrip())

# Broker scenarios against the url one of the same sitting: the ratio of
# the medians (above 1: the broker kind is faster).
brokers = [s for s in runs if s.startswith("deliver_") and s != "deliver_idle"
           and any("broker" in r for r in runs[s])]
if brokers and "deliver" in runs:
    print()
    print("-- brokers against deliver (url), medians of this sitting")
    table = [["scenario", "delivered/s", "ratio", "drain delivered/s", "ratio", "runs"]]
    base = {k: median_of(runs["deliver"], k) for k in ("delivered_per_sec", "drain_per_sec")}
    for scenario in ["deliver"] + brokers:
        rs = runs[scenario]
        row = [scenario]
        for k in ("delivered_per_sec", "drain_per_sec"):
            m = median_of(rs, k)
            row += [fmt(m, 0), f"{m / base[k]:.2f}" if m and base[k] else "-"]
        table.append(row + [str(len(rs))])
    print_table(table)

for scenario, rs in pull.items():
    figures = PULL_FIGURES.get(rs[0].get("pull"), [])
    head = ["figure"] + [f"run {i + 1}" for i in range(len(rs))] + ["median"]
    rows = [[label] + [fmt(r.get(key), d) for r in rs] + [fmt(median_of(rs, key), d)]
            for key, label, d in figures]
    print()
    print(f"-- {scenario}: durability={rs[0].get('durability')}")
    print_table([head] + rows)

if pull:
    print()
    print("-- pull medians (targets: the Pull issue's, on an idle machine)")
    table = [["scenario", "figure", "median", "runs", "target"]]
    for scenario, rs in pull.items():
        for mode, key, label, target in PULL_TARGETS:
            if rs[0].get("pull") == mode:
                table.append([scenario, label, fmt(median_of(rs, key), PULL_DECIMALS[key]),
                              str(len(rs)), target])
    print_table(table, text_columns=2)

# Outage scenarios: every figure per run with its median, then before and
# after side by side. A run that did not deliver everything within the
# timeout has no time: "not within N s" (how many it delivered by then);
# the median counts such a run as slower than any other.
OUTAGE_FIGURES = [
    ("events", "events stored", 0),
    ("ingest_secs", "storing them s", 2),
    ("attempts_while_down", "attempts while down", 0),
    ("first_ok_secs", "switch -> first 2xx (probe) s", 2),
    ("backlog_secs", "first 2xx -> all delivered s", 2),
    ("recovered_secs", "switch -> all delivered s", 2),
    ("delivered_by_cap", "delivered by the timeout", 0),
    ("backlog_per_sec", "delivered/s after the first 2xx", 0),
    ("peak_sliding", "peak requests in 1 s (sliding)", 0),
    ("peak_aligned", "peak requests in 1 s (whole s)", 0),
    ("recovery_peak_sliding", "after the switch: peak (sliding)", 0),
    ("peak_allowed", "allowed by the rate check", 0),
    ("order_violations", "per-key order broken", 0),
    ("duplicates", "duplicates", 0),
    ("missing", "never delivered", 0),
    ("dead", "deliveries dead", 0),
    ("pending", "deliveries pending at the end", 0),
    ("server_log_warnings", "server WARN/ERROR lines", 0),
]
TIMED = {"backlog_secs", "recovered_secs"}

def outage_cell(r, key, d):
    v = r.get(key)
    if key in TIMED and v is None:
        return f"not within {r['recovery_timeout']:g} s"
    return fmt(v, d)

def outage_median(rs, key, d):
    if key in TIMED:
        vals = sorted(float("inf") if r.get(key) is None else r[key] for r in rs)
        med = statistics.median(vals) if vals else None
        if med == float("inf"):
            return f"not within {rs[0]['recovery_timeout']:g} s"
        return fmt(med, d)
    return fmt(median_of(rs, key), d)

for scenario, rs in outage.items():
    r0 = rs[0]
    print()
    print(f"-- {scenario}: {r0['events']} events, {r0['order_keys']} keys, down {r0['outage_secs']:g} s, "
          f"rate {r0.get('rate') or 'none'}, breaker_failures {r0['breaker_failures']}, "
          f"probe {r0.get('breaker_probe') or '-'}, durability={r0.get('durability')}")
    head = ["figure"] + [f"run {i + 1}" for i in range(len(rs))] + ["median"]
    rows = [[label] + [outage_cell(r, key, d) for r in rs] + [outage_median(rs, key, d)]
            for key, label, d in OUTAGE_FIGURES]
    print_table([head] + rows)

if outage:
    print()
    print("-- outage: before (no breaker, no rate) and after, medians")
    sides = [s for s in ("outage_before", "outage") if s in outage]
    table = [["figure"] + [f"{s} ({len(outage[s])} runs)" for s in sides]]
    for key, label, d in OUTAGE_FIGURES:
        if key in ("events", "peak_allowed", "server_log_warnings"):
            continue
        table.append([label] + [outage_median(outage[s], key, d) for s in sides])
    print_table(table)
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

if [ "${FORGED:-0}" = 1 ]; then
    echo
    echo "== forged: valid deliveries alone, then beside a flood of forged ones"
    ulimit -n "$(ulimit -Hn)" || true
    "$root/target/release/hookbox-attack" --hookbox "$root/target/release/hookbox" \
        --phases baseline,forged --phase "$DURATION" --runs "$RUNS" || failed=1
fi

if [ "$failed" -ne 0 ]; then
    echo
    echo "!! at least one run failed its checks: see the messages above"
    exit 1
fi
