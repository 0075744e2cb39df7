//! `hookbox-loadgen`: one invocation runs one benchmark scenario against the
//! real hookbox release binary.
//!
//! It starts `hookbox serve` on a fresh database in a temp dir, measures
//! start-up-to-ready and idle memory, drives `POST /hooks/github` from many
//! keep-alive connections for a warm-up plus a measured window, samples the
//! server's memory, stops it with SIGTERM, and checks that the database holds
//! exactly one row per 202 it answered. It prints a one-line summary and a
//! JSON line (the line `bench/run.sh` collects). The exit status is non-zero
//! when the server fails to start, exits non-zero, breaks the answer contract
//! (a new id answered 200, a repeat answered 202 or with another row id), or
//! the row count does not match.
//!
//! With `--deliver` the source also gets a url destination: a downstream
//! HTTP server inside this process that answers 204 at once. The run then
//! reports delivered events/s, receipt-to-downstream latency, how long the
//! backlog takes to drain after the ingest stops, and checks that every row
//! ends `delivered` and every accepted id reached the downstream (see
//! `deliver`). `--idle` paces one connection at one request every 20 ms.
//! `--routes` (with `--deliver`) gives the source two `[[sources.deliver]]`
//! destinations instead, `a` taking every event and `b` a filter that takes
//! half of them, each posting to its own path of the downstream; every
//! delivery figure and check is then per destination, and `b` must get
//! exactly the events its filter takes. `--listen` (with `--deliver`)
//! gives the source a `pull` destination instead, and the real `hookbox
//! listen` forwards its events to the downstream: the same figures and
//! checks, with the downstream checking bodies instead of signatures.
//!
//! `--pull` runs a pull scenario instead (`pull`): hand-off latency to a
//! long-poll, `hookbox listen --once` draining a backlog, or what idle
//! long-polls cost.
//!
//! `--outage` runs the outage scenario instead (`outage`): the destination
//! answers 503 while a backlog is stored, then comes back; with the circuit
//! breaker and a rate (`after`) or as before they existed (`before`).
//!
//! `server` owns the child process, `load` the connections and their
//! figures, `payload` the signed request bodies, `downstream` the delivery
//! target and `deliver` the delivery figures.

mod broker;
mod deliver;
mod downstream;
mod load;
mod outage;
mod payload;
mod pull;
mod server;

use anyhow::{Context, Result, bail};
use clap::Parser;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use deliver::Figures;
use downstream::{Check, Downstream};
use load::{LoadConfig, Outcome, Receipts};
use payload::Signer;
use pull::listen::{ListenChild, ListenExit};
use server::{
    Deliver, SECRET, Server, clock_ticks_per_sec, count_events, proc_cpu, proc_status_kib,
    proc_tree_cpu, search_figures,
};

/// How long the server idles after /readyz before its idle RSS is read.
const IDLE_SETTLE: Duration = Duration::from_millis(500);
/// Memory sampling period during the run.
const RSS_PERIOD: Duration = Duration::from_millis(100);
/// `--idle`: the gap between requests of its single connection.
const IDLE_PACE_MS: f64 = 20.0;
/// `--listen`: how long `hookbox listen` gets to exit after SIGINT.
const LISTEN_GRACE: Duration = Duration::from_secs(10);

#[derive(Parser, Debug)]
#[command(
    name = "hookbox-loadgen",
    version,
    about = "Benchmark hookbox: start the server, load POST /hooks/github, check the database"
)]
struct Args {
    /// Label for the report; defaults to "new" or "dupNN" from --duplicates.
    #[arg(long)]
    scenario: Option<String>,
    /// The hookbox binary to start [default: <workspace>/target/release/hookbox].
    #[arg(long)]
    hookbox: Option<PathBuf>,
    /// Concurrent keep-alive HTTP/1.1 connections.
    #[arg(long, default_value_t = 64)]
    connections: u32,
    /// Measured window in seconds (after the warm-up).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Warm-up in seconds, sent but not counted in rates and latencies.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Share (0..=1) of requests that resend an id already answered 202.
    #[arg(long, default_value_t = 0.0)]
    duplicates: f64,
    /// server.durability in the generated config.
    #[arg(long, default_value = "full", value_parser = ["full", "normal"])]
    durability: String,
    /// `[search] enabled = false` in the generated config: ingest without
    /// the full-text index, to compare with it.
    #[arg(long)]
    no_search: bool,
    /// Load generator threads (1 = a current-thread runtime, leaving the
    /// other cores to the server).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Seconds before an unanswered request counts as an error.
    #[arg(long, default_value_t = 30.0)]
    request_timeout: f64,
    /// Seconds the server gets to exit after SIGTERM.
    #[arg(long, default_value_t = 30.0)]
    stop_timeout: f64,
    /// Keep the temp dir (config, database, server log) and print its path.
    #[arg(long)]
    keep: bool,
    /// Give the source a url destination (a local downstream that answers
    /// 204 at once, default deliver settings) and report delivery figures.
    #[arg(long)]
    deliver: bool,
    /// With --deliver: two named destinations instead of one, `a` (every
    /// event) and `b` (push events whose body has "even" at
    /// /hookbox_bench/parity: half), posting to /a and /b of the downstream.
    #[arg(long, requires = "deliver")]
    routes: bool,
    /// With --deliver: a `pull` destination instead of a url, and the real
    /// `hookbox listen` forwarding its events to the downstream (stopped
    /// with SIGINT once the backlog drained).
    #[arg(long, requires = "deliver", conflicts_with = "routes")]
    listen: bool,
    /// With --deliver: the destination is this broker kind instead of a
    /// url, its real server started on loopback (see `broker`).
    #[arg(long, value_enum, requires = "deliver", conflicts_with_all = ["routes", "listen"])]
    broker: Option<broker::Kind>,
    /// With --deliver: the destination has this jq `transform` (the
    /// transform scenario gives it the cookbook's GitHub push → Discord
    /// recipe, with --expect-body its output).
    #[arg(long, requires = "deliver", conflicts_with_all = ["routes", "listen"])]
    transform: Option<String>,
    /// With --deliver: the destination's `concurrency` (without it, the
    /// kind's default), to compare attempts in flight.
    #[arg(long, requires = "deliver", conflicts_with_all = ["routes", "listen"])]
    concurrency: Option<usize>,
    /// With --deliver: the destination is paused (by hand, through the
    /// admin API) while the load runs and resumed when it stops, so the
    /// drain is the whole ingest's backlog: how fast the destination kind
    /// delivers with the machine to itself.
    #[arg(long, requires = "deliver", conflicts_with_all = ["routes", "listen"])]
    paused: bool,
    /// With --transform: every body that arrives must be exactly this (the
    /// program's output for the push bodies sent), or it counts as a bad
    /// signature.
    #[arg(long, requires = "transform")]
    expect_body: Option<String>,
    /// One connection sending one request every 20 ms (overrides
    /// --connections and --pace-ms): latency when idle.
    #[arg(long)]
    idle: bool,
    /// Milliseconds from one request's start to the next on each connection
    /// (instead of back to back).
    #[arg(long)]
    pace_ms: Option<f64>,
    /// With --deliver: seconds to wait after the ingest stops for the
    /// backlog to drain before stopping the server.
    #[arg(long, default_value_t = 60.0)]
    drain_timeout: f64,
    /// A pull scenario instead of the ingest load: the source gets a `pull`
    /// destination and consumers take from it (see `pull`).
    #[arg(long, value_enum, conflicts_with_all = ["deliver", "idle"])]
    pull: Option<pull::Mode>,
    /// --pull listen: events stored before `hookbox listen --once` runs.
    #[arg(long, default_value_t = 20_000)]
    events: u64,
    /// --pull idle: long-polls held open.
    #[arg(long, default_value_t = 100)]
    long_polls: u32,
    /// `--max` for `hookbox listen` (its own default when not given).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=100))]
    listen_max: Option<u16>,
    /// The outage scenario instead of the ingest load: `after` with the
    /// breaker (default failures, --probe) and --rate, `before` with
    /// `breaker_failures = 0` and no rate (see `outage`). --connections
    /// post the events.
    #[arg(long, value_enum, conflicts_with_all = ["deliver", "idle", "pull"])]
    outage: Option<outage::Mode>,
    /// --outage: events stored while the destination is down.
    #[arg(long, default_value_t = 10_000)]
    outage_events: u64,
    /// --outage: seconds from the first post until the destination is back.
    #[arg(long, default_value_t = 30.0)]
    outage_secs: f64,
    /// --outage: order keys the events are spread over (by their number).
    #[arg(long, default_value_t = 300)]
    order_keys: u64,
    /// --outage after: the destination's `rate` (`N/s` or `N/m`); none
    /// when not given.
    #[arg(long, value_parser = outage::parse_rate)]
    rate: Option<outage::Rate>,
    /// --outage after: the destination's `breaker_probe` (hookbox's default
    /// is 30s; shorter keeps the run short).
    #[arg(long, default_value = "5s")]
    probe: String,
    /// --outage: seconds after the destination is back before the run
    /// stops waiting for the backlog.
    #[arg(long, default_value_t = 180.0)]
    recovery_timeout: f64,
}

impl Args {
    fn check(&self) -> Result<()> {
        if !(0.0..=1.0).contains(&self.duplicates) {
            bail!(
                "--duplicates must be between 0 and 1, got {}",
                self.duplicates
            );
        }
        if self.connections == 0 || self.threads == 0 {
            bail!("--connections and --threads must be at least 1");
        }
        for (name, v) in [
            ("--duration", self.duration),
            ("--warmup", self.warmup),
            ("--request-timeout", self.request_timeout),
            ("--stop-timeout", self.stop_timeout),
            ("--drain-timeout", self.drain_timeout),
            ("--pace-ms", self.pace_ms.unwrap_or(0.0)),
            ("--outage-secs", self.outage_secs),
            ("--recovery-timeout", self.recovery_timeout),
        ] {
            if !v.is_finite() || v < 0.0 {
                bail!("{name} must be a non-negative number of seconds, got {v}");
            }
        }
        if self.duration == 0.0 {
            bail!("--duration must be above 0");
        }
        if self.events == 0 || self.long_polls == 0 {
            bail!("--events and --long-polls must be at least 1");
        }
        if self.outage_events == 0 || self.order_keys == 0 {
            bail!("--outage-events and --order-keys must be at least 1");
        }
        Ok(())
    }

    fn scenario(&self) -> String {
        match &self.scenario {
            Some(s) => s.clone(),
            None if let Some(mode) = self.pull => mode.scenario().to_owned(),
            None if let Some(mode) = self.outage => mode.scenario().to_owned(),
            None if self.listen => "pull_listen_ingest".to_owned(),
            None if let Some(kind) = self.broker => kind.scenario().to_owned(),
            None if self.routes && self.idle => "deliver2_idle".to_owned(),
            None if self.routes => "deliver2".to_owned(),
            None if self.deliver && self.transform.is_some() => "transform".to_owned(),
            None if self.deliver && self.idle => "deliver_idle".to_owned(),
            None if self.deliver => "deliver".to_owned(),
            None if self.idle => "idle".to_owned(),
            None if self.duplicates == 0.0 => "new".to_owned(),
            None => format!("dup{}", (self.duplicates * 100.0).round()),
        }
    }

    fn connections(&self) -> u32 {
        if self.idle { 1 } else { self.connections }
    }

    fn pace(&self) -> Option<Duration> {
        let ms = if self.idle {
            Some(IDLE_PACE_MS)
        } else {
            self.pace_ms
        };
        ms.filter(|&ms| ms > 0.0)
            .map(|ms| Duration::from_secs_f64(ms / 1000.0))
    }

    fn hookbox(&self) -> PathBuf {
        self.hookbox.clone().unwrap_or_else(|| {
            // bench/ sits directly under the workspace root.
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/release/hookbox")
        })
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("hookbox-loadgen: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Returns whether every check passed.
fn run(args: Args) -> Result<bool> {
    args.check()?;
    let runtime = if args.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()
    }
    .context("building the tokio runtime")?;
    runtime.block_on(async {
        // Returning drops the scenario and with it the server (kill_on_drop)
        // and its temp dir, instead of leaving them behind.
        tokio::select! {
            r = scenario(args) => r,
            signal = interrupted() => bail!("interrupted by {}", signal?),
        }
    })
}

/// Resolves on SIGINT or SIGTERM with the signal's name.
async fn interrupted() -> Result<&'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
    let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    Ok(tokio::select! {
        _ = int.recv() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    })
}

/// Everything measured in one run, ready to print.
struct Report {
    scenario: String,
    args_connections: u32,
    duration: f64,
    durability: String,
    threads: usize,
    duplicates_share: f64,
    startup: Duration,
    idle_kib: u64,
    peak_kib: u64,
    hwm_kib: Option<u64>,
    load: Outcome,
    rows: u64,
    exit_code: Option<i32>,
    shutdown: Duration,
    /// Wall time of warm-up plus measured window, as it actually ran.
    load_wall: Duration,
    /// CPU time over `load_wall`, when /proc could tell.
    server_cpu: Option<Duration>,
    loadgen_cpu: Option<Duration>,
    /// CPU time of the server and its children (transform processes) from
    /// the load's start to the drain's end.
    tree_cpu: Option<Duration>,
    /// `--paused` runs only: CPU time of the server and its children, and
    /// of the broker, from the resume to the drain's end.
    drain_cpu: Option<(Duration, Option<Duration>)>,
    /// `--deliver` runs only.
    deliver: Option<Figures>,
    /// `--broker` runs only.
    broker: Option<broker::progress::BrokerFigures>,
    drain_timeout: f64,
    /// `--listen` runs only: how `hookbox listen` ended after SIGINT.
    listen: Option<ListenExit>,
    /// Whether the server indexed bodies (`--no-search` turns it off).
    search: bool,
    /// Events not yet indexed when the load stopped.
    index_lag_at_end: Option<i64>,
    /// The search index's pages and the whole file, after the stop.
    index_bytes: i64,
    db_bytes: i64,
}

async fn scenario(args: Args) -> Result<bool> {
    let binary = args.hookbox();
    if !binary.is_file() {
        bail!(
            "{} not found: build it with `cargo build --release -p hookbox` or pass --hookbox",
            binary.display()
        );
    }
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x5eed);
    if let Some(mode) = args.pull {
        return pull::run(&args, mode, &binary, nonce).await;
    }
    if let Some(mode) = args.outage {
        return outage::run(&args, mode, &binary, nonce).await;
    }
    let signer = Signer::new(SECRET.as_bytes(), nonce)?;
    // Only the routes' filter reads the parity: every other run sends the
    // bodies it always sent.
    let signer = Arc::new(if args.routes {
        signer.with_parity()
    } else {
        signer
    });
    // The downstream comes first: the server's config names its port.
    let url_deliver = args.deliver && args.broker.is_none();
    let lanes = if url_deliver {
        deliver::lanes(args.routes, nonce)
    } else {
        Vec::new()
    };
    let mut downstream = None;
    let mut deliver_to = Deliver::Nowhere;
    let broker = match args.broker {
        Some(kind) => Some(broker::Broker::start(kind).await?),
        None => None,
    };
    if let Some(b) = &broker {
        deliver_to = Deliver::Broker(b.destination(), args.concurrency);
    }
    if url_deliver {
        // `hookbox listen` forwards the provider's body and headers, with
        // no signature of its own.
        let check = |l: &deliver::Lane| {
            if args.listen {
                Check::Body(Arc::clone(&signer))
            } else if let Some(body) = &args.expect_body {
                Check::SignedAs(l.key.clone(), bytes::Bytes::from(body.clone()))
            } else {
                Check::Signed(l.key.clone())
            }
        };
        let d = Downstream::start(lanes.iter().map(|l| (l.path.clone(), check(l))).collect())?;
        deliver_to = if args.listen {
            pull::destination(None)
        } else {
            deliver::config(&lanes, d.addr, args.routes, args.transform.as_deref())
        };
        if let (Deliver::One { concurrency, .. }, Some(n)) = (&mut deliver_to, args.concurrency) {
            *concurrency = Some(n);
        }
        downstream = Some(d);
    }
    let (mut server, startup) =
        Server::start(&binary, &args.durability, !args.no_search, &deliver_to).await?;
    let pid = server.pid();
    if args.keep {
        eprintln!("keeping {}", server.keep_dir().display());
    }
    // `--listen`: forwarding from the start, as a developer's laptop would.
    let mut listener = match (&downstream, args.listen) {
        (Some(d), true) => Some(ListenChild::spawn(
            &binary,
            server.public,
            &format!("http://{}{}", d.addr, lanes[0].path),
            false,
            args.listen_max,
        )?),
        _ => None,
    };

    tokio::time::sleep(IDLE_SETTLE).await;
    let idle_kib = proc_status_kib(pid, "VmRSS").context("reading the idle RSS")?;
    let peak = Arc::new(AtomicU64::new(idle_kib));
    let sampler = tokio::spawn(sample_rss(pid, Arc::clone(&peak)));

    let receipts = url_deliver.then(|| Arc::new(Receipts::default()));
    let mut delivered = broker
        .as_ref()
        .map(|_| broker::progress::Sampler::start(&server.database));
    let cfg = LoadConfig {
        addr: server.public,
        connections: args.connections(),
        warmup: Duration::from_secs_f64(args.warmup),
        duration: Duration::from_secs_f64(args.duration),
        duplicates: args.duplicates,
        request_timeout: Duration::from_secs_f64(args.request_timeout),
        signer,
        seed: nonce.rotate_left(17),
        pace: args.pace(),
        receipts: receipts.clone(),
    };
    let ticks = clock_ticks_per_sec();
    let own_pid = std::process::id();
    let cpu_before = (proc_cpu(pid, ticks).ok(), proc_cpu(own_pid, ticks).ok());
    let tree_before = proc_tree_cpu(pid, ticks).ok();
    // The single `[sources.deliver]` table is the destination `default`.
    if args.paused {
        server
            .admin_post("/api/destinations/github/default/pause")
            .await?;
    }
    let load_started = Instant::now();
    let load = load::run(Arc::new(cfg)).await;
    let load_wall = load_started.elapsed();
    let ingest_end = Instant::now();
    if args.paused {
        server
            .admin_post("/api/destinations/github/default/resume")
            .await?;
    }
    let drain_cpu_before = args.paused.then(|| {
        let broker_cpu = broker.as_ref().and_then(|b| b.cpu(ticks).ok());
        (proc_tree_cpu(pid, ticks).ok(), broker_cpu)
    });
    // How far the index trails the last insert when the load stops.
    let lag_at_end = search_figures(&server.database).ok().map(|f| f.lag_rows);
    let cpu_used = |before: Option<Duration>, pid: u32| {
        Some(proc_cpu(pid, ticks).ok()?.saturating_sub(before?))
    };
    let server_cpu = cpu_used(cpu_before.0, pid);
    let loadgen_cpu = cpu_used(cpu_before.1, own_pid);
    let drain = match (&downstream, &receipts, &load) {
        (Some(d), Some(r), Ok(_)) => Some(
            deliver::wait_for_drain(
                d,
                &lanes,
                r,
                &server.database,
                ingest_end + Duration::from_secs_f64(args.drain_timeout),
            )
            .await,
        ),
        _ => None,
    };
    let broker_drain = match (&broker, &load) {
        (Some(_), Ok(_)) => {
            let until = ingest_end + Duration::from_secs_f64(args.drain_timeout);
            broker::progress::wait_for_drain(&server.database, until).await
        }
        _ => None,
    };
    if let Some(d) = delivered.as_mut() {
        d.stop();
    }
    let drain_cpu = drain_cpu_before.and_then(|(tree, broker_cpu)| {
        let tree = proc_tree_cpu(pid, ticks).ok()?.saturating_sub(tree?);
        let broker_cpu = broker
            .as_ref()
            .and_then(|b| Some(b.cpu(ticks).ok()?.saturating_sub(broker_cpu?)));
        Some((tree, broker_cpu))
    });
    // Ingest and delivery to the end of the drain, the transform
    // processes included.
    let tree_cpu = proc_tree_cpu(pid, ticks)
        .ok()
        .zip(tree_before)
        .map(|(after, before)| after.saturating_sub(before));
    sampler.abort();
    if let Ok(kib) = proc_status_kib(pid, "VmRSS") {
        peak.fetch_max(kib, Ordering::Relaxed);
    }
    let hwm_kib = proc_status_kib(pid, "VmHWM").ok();
    // Ctrl-C, as a developer stops it: it gives back what it holds.
    let listen = match listener.as_mut() {
        Some(l) => Some(l.interrupt(LISTEN_GRACE).await?),
        None => None,
    };
    let load = load?;

    let exit = server
        .stop(Duration::from_secs_f64(args.stop_timeout))
        .await?;
    let rows = count_events(&server.database)?;
    let search = search_figures(&server.database)?;
    let deliver = match (&mut downstream, &receipts, &drain) {
        (Some(d), Some(r), Some(drain)) => {
            // Whatever arrived during the shutdown counts too.
            d.stop();
            Some(Figures::collect(&deliver::Run {
                downstream: d,
                lanes: &lanes,
                routes: args.routes,
                receipts: r,
                window: load.window,
                ingest_end,
                drain,
                database: &server.database,
                log: &server.log_text(),
            })?)
        }
        _ => None,
    };
    let broker = match (&broker, &delivered) {
        (Some(b), Some(d)) => {
            Some(broker_figures(b, d, &load, ingest_end, broker_drain, &server.database).await?)
        }
        _ => None,
    };

    let report = Report {
        scenario: args.scenario(),
        args_connections: args.connections(),
        duration: args.duration,
        durability: args.durability.clone(),
        threads: args.threads,
        duplicates_share: args.duplicates,
        startup,
        idle_kib,
        peak_kib: peak.load(Ordering::Relaxed),
        hwm_kib,
        load,
        rows,
        exit_code: exit.status.code(),
        shutdown: exit.shutdown,
        load_wall,
        server_cpu,
        loadgen_cpu,
        tree_cpu,
        drain_cpu,
        deliver,
        broker,
        drain_timeout: args.drain_timeout,
        listen,
        search: !args.no_search,
        index_lag_at_end: lag_at_end,
        index_bytes: search.index_bytes,
        db_bytes: search.db_bytes,
    };
    let ok = report.print();
    if !ok {
        eprintln!("server log (tail):\n{}", server.log_tail(40));
    }
    Ok(ok)
}

/// `bytes` over `rows`, rounded; none without rows.
/// A broker run's figures: the delivered-rows samples against the
/// measured window, the drain, the stopped server's rows and what the
/// broker holds.
async fn broker_figures(
    broker: &broker::Broker,
    delivered: &broker::progress::Sampler,
    load: &Outcome,
    ingest_end: Instant,
    drained: Option<Instant>,
    database: &std::path::Path,
) -> Result<broker::progress::BrokerFigures> {
    let (from, until) = load.window;
    let secs = until.saturating_duration_since(from).as_secs_f64();
    let in_window = delivered.at(until).saturating_sub(delivered.at(from));
    let states = server::count_states(database)?;
    let rows_delivered = deliver::count(&states, "delivered");
    let rows_undelivered = states
        .iter()
        .filter(|(s, _)| s != "delivered")
        .map(|(_, n)| n)
        .sum();
    let (attempts, _) = server::attempt_summary(database)?;
    Ok(broker::progress::BrokerFigures {
        kind: broker.kind.scenario(),
        delivered_per_sec: if secs > 0.0 {
            in_window as f64 / secs
        } else {
            0.0
        },
        backlog_at_ingest_end: load.total.accepted.saturating_sub(delivered.at(ingest_end)),
        drain: drained.map(|t| t.saturating_duration_since(ingest_end)),
        rows_undelivered,
        rows_delivered,
        held: broker.held(rows_delivered).await?,
        attempts_retry: deliver::count(&attempts, "retry"),
    })
}

/// CPU time per delivery, in microseconds.
fn per_delivery(cpu: Duration, deliveries: u64) -> f64 {
    round(cpu.as_secs_f64() * 1e6 / deliveries.max(1) as f64, 1)
}

fn per_row(bytes: i64, rows: u64) -> Option<f64> {
    (rows > 0).then(|| round(bytes as f64 / rows as f64, 0))
}

/// Keeps the highest VmRSS seen in `peak` until aborted.
async fn sample_rss(pid: u32, peak: Arc<AtomicU64>) {
    let mut tick = tokio::time::interval(RSS_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        if let Ok(kib) = proc_status_kib(pid, "VmRSS") {
            peak.fetch_max(kib, Ordering::Relaxed);
        }
    }
}

fn mib(kib: u64) -> f64 {
    round(kib as f64 / 1024.0, 1)
}

/// A JSON object with its keys in the given order (serde_json's `Map`
/// sorts them), so the line reads headline figures first.
fn ordered_json(fields: &[(String, Value)]) -> String {
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}:{v}", Value::from(k.as_str())))
        .collect();
    format!("{{{}}}", body.join(","))
}

fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

impl Report {
    /// Prints the summary, the JSON line and the verdict; returns whether
    /// every check passed.
    fn print(&self) -> bool {
        let l = &self.load;
        let per_sec = |n: u64| round(n as f64 / self.duration, 1);
        let rows_match = self.rows == l.total.accepted;
        let exited_ok = self.exit_code == Some(0);
        let max_ms = round(
            l.latencies_us
                .last()
                .map_or(0.0, |&us| f64::from(us) / 1000.0),
            3,
        );
        let (p50, p99, p999) = (
            round(l.quantile_ms(0.5), 3),
            round(l.quantile_ms(0.99), 3),
            round(l.quantile_ms(0.999), 3),
        );

        let cpu_pct = |cpu: Option<Duration>| {
            cpu.map(|c| round(c.as_secs_f64() / self.load_wall.as_secs_f64() * 100.0, 0))
        };
        let show_pct =
            |cpu: Option<Duration>| cpu_pct(cpu).map_or("?".to_owned(), |p| format!("{p}%"));
        println!(
            "{}: {} conns {}s durability={} | {} accepted/s {} dup/s {} req/s | p50 {p50} ms p99 {p99} ms p99.9 {p999} ms | errors {} 503s {} other {} | cpu server {} loadgen {} | rss idle {} MiB peak {} MiB | startup {} ms | rows {} vs 202s {} {} | exit {} in {} ms",
            self.scenario,
            self.args_connections,
            self.duration,
            self.durability,
            per_sec(l.measured.accepted),
            per_sec(l.measured.duplicate),
            per_sec(l.measured.answered()),
            l.total.errors,
            l.total.unavailable,
            l.total.other,
            show_pct(self.server_cpu),
            show_pct(self.loadgen_cpu),
            mib(self.idle_kib),
            mib(self.peak_kib),
            round(self.startup.as_secs_f64() * 1000.0, 1),
            self.rows,
            l.total.accepted,
            if rows_match { "OK" } else { "MISMATCH" },
            self.exit_code
                .map_or_else(|| "by signal".to_owned(), |c| c.to_string()),
            self.shutdown.as_millis(),
        );
        let fields: Vec<(&str, Value)> = vec![
            ("scenario", json!(self.scenario)),
            ("connections", json!(self.args_connections)),
            ("duration", json!(self.duration)),
            ("accepted_per_sec", json!(per_sec(l.measured.accepted))),
            ("duplicates_per_sec", json!(per_sec(l.measured.duplicate))),
            ("requests_per_sec", json!(per_sec(l.measured.answered()))),
            ("p50_ms", json!(p50)),
            ("p99_ms", json!(p99)),
            ("p999_ms", json!(p999)),
            ("errors", json!(l.total.errors)),
            ("peak_rss_mib", json!(mib(self.peak_kib))),
            ("idle_rss_mib", json!(mib(self.idle_kib))),
            (
                "startup_ms",
                json!(round(self.startup.as_secs_f64() * 1000.0, 1)),
            ),
            ("rows", json!(self.rows)),
            ("rows_match", json!(rows_match)),
            // Beyond the headline figures: what explains them.
            ("max_ms", json!(max_ms)),
            ("status_503", json!(l.total.unavailable)),
            ("status_other", json!(l.total.other)),
            ("wrong_status", json!(l.anomalies.wrong_status)),
            ("wrong_id", json!(l.anomalies.wrong_id)),
            ("no_id", json!(l.anomalies.no_id)),
            ("reconnects", json!(l.reconnects)),
            ("accepted_total", json!(l.total.accepted)),
            ("hwm_rss_mib", json!(self.hwm_kib.map(mib))),
            ("server_cpu_pct", json!(cpu_pct(self.server_cpu))),
            (
                "cpu_us_per_event",
                json!(
                    self.tree_cpu
                        .filter(|_| l.measured.accepted > 0)
                        .map(|c| round(c.as_secs_f64() * 1e6 / (self.rows.max(1) as f64), 1))
                ),
            ),
            ("loadgen_cpu_pct", json!(cpu_pct(self.loadgen_cpu))),
            // Paused: every accepted event is delivered in the drain.
            (
                "drain_server_us_per_delivery",
                json!(
                    self.drain_cpu
                        .map(|(c, _)| per_delivery(c, l.total.accepted))
                ),
            ),
            (
                "drain_broker_us_per_delivery",
                json!(
                    self.drain_cpu
                        .and_then(|(_, b)| b)
                        .map(|c| per_delivery(c, l.total.accepted))
                ),
            ),
            ("shutdown_ms", json!(self.shutdown.as_millis() as u64)),
            ("exit_code", json!(self.exit_code)),
            ("durability", json!(self.durability)),
            ("duplicates", json!(self.duplicates_share)),
            ("loadgen_threads", json!(self.threads)),
            ("search", json!(self.search)),
            ("index_lag_at_ingest_end", json!(self.index_lag_at_end)),
            (
                "index_bytes_per_event",
                json!(per_row(self.index_bytes, self.rows)),
            ),
            (
                "db_bytes_per_event",
                json!(per_row(self.db_bytes, self.rows)),
            ),
        ];
        let mut fields: Vec<(String, Value)> =
            fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        if let Some(d) = &self.deliver {
            fields.extend(d.fields(self.duration, self.drain_timeout));
            d.print(self.duration, self.drain_timeout);
        }
        if let Some(b) = &self.broker {
            fields.extend(b.fields());
            b.print();
        }
        if let Some(l) = &self.listen {
            fields.push(("listen_exit_code".to_owned(), json!(l.code)));
            fields.push(("listen_cpu_pct".to_owned(), json!(l.cpu_pct())));
            println!(
                "  listen: exit {:?} after SIGINT, cpu {}",
                l.code,
                l.cpu_pct().map_or("?".to_owned(), |p| format!("{p}%"))
            );
        }
        let line = ordered_json(&fields);
        println!("{line}");

        for s in &l.samples {
            eprintln!("  example: {s}");
        }
        let mut ok = true;
        if !rows_match {
            ok = false;
            eprintln!(
                "MISMATCH: events holds {} rows but the server answered 202 {} times ({} requests got no answer)",
                self.rows, l.total.accepted, l.total.errors
            );
        }
        if !exited_ok {
            ok = false;
            eprintln!(
                "FAIL: the server exited with {:?} after SIGTERM (expected 0)",
                self.exit_code
            );
        }
        if l.anomalies.any() {
            ok = false;
            eprintln!(
                "FAIL: answers broke the contract: {} wrong status (new->200 or repeat->202), {} duplicate with another id, {} 2xx without an id",
                l.anomalies.wrong_status, l.anomalies.wrong_id, l.anomalies.no_id
            );
        }
        if let Some(d) = &self.deliver {
            ok &= d.check(self.drain_timeout);
        }
        if let Some(b) = &self.broker
            && let Err(e) = b.check()
        {
            ok = false;
            eprintln!("FAIL: {e}");
        }
        if let Some(l) = &self.listen
            && l.code != Some(0)
        {
            ok = false;
            eprintln!(
                "FAIL: hookbox listen exited with {:?} after SIGINT (expected 0)",
                l.code
            );
        }
        if ok {
            println!("OK");
        }
        ok
    }
}

/// `a=1 b=2` for a report line.
fn pairs(v: &[(String, u64)]) -> String {
    if v.is_empty() {
        return "none".to_owned();
    }
    v.iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("hookbox-loadgen").chain(args.iter().copied()))
    }

    #[test]
    fn pull_runs_are_named_after_their_scenario_and_the_others_as_before() {
        let name = |args: &[&str]| parse(args).unwrap().scenario();
        assert_eq!(name(&["--pull", "latency"]), "pull_latency");
        assert_eq!(name(&["--pull", "listen"]), "pull_listen");
        assert_eq!(name(&["--pull", "idle"]), "pull_idle");
        assert_eq!(name(&["--deliver", "--listen"]), "pull_listen_ingest");
        assert_eq!(name(&["--deliver"]), "deliver");
        assert_eq!(name(&["--deliver", "--idle"]), "deliver_idle");
        assert_eq!(name(&["--deliver", "--routes"]), "deliver2");
        assert_eq!(name(&[]), "new");
        assert_eq!(name(&["--pull", "idle", "--scenario", "x"]), "x");
    }

    #[test]
    fn outage_runs_parse_their_mode_rate_and_probe() {
        let a = parse(&["--outage", "after", "--rate", "500/s", "--probe", "5s"]).unwrap();
        assert_eq!(a.scenario(), "outage");
        assert_eq!(a.outage, Some(outage::Mode::After));
        assert_eq!(a.rate.as_ref().map(|r| r.per_sec), Some(500.0));
        assert_eq!(a.probe, "5s");
        assert_eq!((a.outage_events, a.order_keys), (10_000, 300));
        assert_eq!((a.outage_secs, a.recovery_timeout), (30.0, 180.0));
        a.check().unwrap();
        let b = parse(&["--outage", "before", "--outage-events", "50"]).unwrap();
        assert_eq!(b.scenario(), "outage_before");
        assert_eq!((b.outage_events, b.rate), (50, None));
        assert_eq!(
            parse(&["--rate", "120/m"]).unwrap().rate.unwrap().per_sec,
            2.0
        );

        assert!(parse(&["--outage", "after", "--rate", "500"]).is_err());
        assert!(parse(&["--outage", "later"]).is_err());
        assert!(parse(&["--outage", "after", "--deliver"]).is_err());
        assert!(parse(&["--outage", "after", "--pull", "idle"]).is_err());
        for bad in [
            &["--outage", "after", "--order-keys", "0"][..],
            &["--outage", "after", "--outage-secs=-1"],
            &["--outage", "after", "--outage-events", "0"],
        ] {
            assert!(parse(bad).unwrap().check().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn pull_and_listen_refuse_what_they_cannot_combine_with() {
        assert!(parse(&["--pull", "idle", "--deliver"]).is_err());
        assert!(parse(&["--pull", "latency", "--idle"]).is_err());
        assert!(parse(&["--listen"]).is_err());
        assert!(parse(&["--deliver", "--listen", "--routes"]).is_err());
        assert!(parse(&["--pull", "listen", "--listen-max", "101"]).is_err());
        assert!(
            parse(&["--pull", "listen", "--events", "0"])
                .unwrap()
                .check()
                .is_err()
        );
    }
}
