//! `pull_latency`: how soon a waiting long-poll hands over an event.
//!
//! One consumer ([`Consumers`]) long-polls the pull destination (`max=10`,
//! `wait=20s`), acks everything it gets and asks again, on its own thread
//! and runtime so that nothing else the load generator does delays its
//! clock readings. Meanwhile one connection posts an event every 20 ms
//! (`--pace-ms`). The hand-off latency of an event is from its 202 (as the
//! load generator read it) to the arrival of the take's answer that holds
//! it, for the events whose 202 came back inside the measured window.
//! After the window the run waits (up to `--drain-timeout`) until the
//! consumer has taken every accepted event, stops it, stops the server and
//! checks that every event was taken exactly once and ends `delivered`.

use anyhow::{Context, Result};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::consumers::Consumers;
use super::{
    Checks, CpuWindow, Handoff, Latencies, Stored, TAKE_MAX, TAKE_WAIT, log_warnings, print_json,
};
use crate::load::{self, LoadConfig, Receipts};
use crate::payload::Signer;
use crate::server::{SECRET, Server, proc_status_kib};
use crate::{Args, IDLE_PACE_MS, IDLE_SETTLE, mib, round};

/// Lets the consumer's first take reach the server before events come.
const CONSUMER_SETTLE: Duration = Duration::from_millis(200);

pub async fn run(args: &Args, binary: &Path, nonce: u64) -> Result<bool> {
    let scenario = args.scenario();
    let (mut server, startup) = Server::start(
        binary,
        &args.durability,
        !args.no_search,
        &super::destination(None),
    )
    .await?;
    if args.keep {
        eprintln!("keeping {}", server.keep_dir().display());
    }
    let pid = server.pid();
    tokio::time::sleep(IDLE_SETTLE).await;
    let idle_kib = proc_status_kib(pid, "VmRSS").context("reading the idle RSS")?;

    let consumer = Consumers::start(server.public, 1)?;
    tokio::time::sleep(CONSUMER_SETTLE).await;
    let receipts = Arc::new(Receipts::default());
    let pace_ms = args.pace_ms.filter(|&ms| ms > 0.0).unwrap_or(IDLE_PACE_MS);
    let cfg = LoadConfig {
        addr: server.public,
        connections: 1,
        warmup: Duration::from_secs_f64(args.warmup),
        duration: Duration::from_secs_f64(args.duration),
        duplicates: 0.0,
        request_timeout: Duration::from_secs_f64(args.request_timeout),
        signer: Arc::new(Signer::new(SECRET.as_bytes(), nonce)?),
        seed: nonce.rotate_left(17),
        pace: Some(Duration::from_secs_f64(pace_ms / 1000.0)),
        receipts: Some(Arc::clone(&receipts)),
    };
    let cpu = CpuWindow::start(pid);
    let load = load::run(Arc::new(cfg)).await;
    let server_cpu = cpu.used();
    let all_taken = consumer
        .wait_for(&receipts, Duration::from_secs_f64(args.drain_timeout))
        .await;
    let taking = consumer.stop();
    let load = load?;
    let exit = server
        .stop(Duration::from_secs_f64(args.stop_timeout))
        .await?;
    let stored = Stored::read(&server.database)?;
    let handoff = Handoff::join(&receipts, &taking.first, load.window);
    let latencies = Latencies::new(handoff.latencies_us.clone());
    let accepted = load.total.accepted;
    let duplicates = taking.twice();

    println!(
        "{scenario}: one event every {pace_ms} ms for {}s, one consumer (max={TAKE_MAX}, wait={}s) | 202 -> take answered p50 {} ms p99 {} ms max {} ms ({} samples, {} before the 202) | {accepted} accepted, {} taken in {} takes ({} empty), {duplicates} taken twice, {} missing | acked {} stale {} | server cpu {} | rss idle {} MiB | exit {:?} in {} ms",
        args.duration,
        TAKE_WAIT.as_secs(),
        latencies.show(0.5),
        latencies.show(0.99),
        latencies.show(1.0),
        latencies.len(),
        handoff.before_202,
        taking.first.len(),
        taking.takes,
        taking.empty_takes,
        handoff.missing,
        taking.acked,
        taking.stale,
        server_cpu.map_or("?".to_owned(), |(_, pct)| format!("{pct}%")),
        mib(idle_kib),
        exit.status.code(),
        exit.shutdown.as_millis(),
    );
    println!("  {}", stored.line());
    let warnings = log_warnings(&server.log_text());
    let mut fields: Vec<(&'static str, Value)> = vec![
        ("duration", json!(args.duration)),
        ("pace_ms", json!(pace_ms)),
        ("handoff_p50_ms", json!(latencies.ms(0.5))),
        ("handoff_p99_ms", json!(latencies.ms(0.99))),
        ("handoff_max_ms", json!(latencies.ms(1.0))),
        ("handoff_samples", json!(latencies.len())),
        ("taken_before_202", json!(handoff.before_202)),
        ("accepted", json!(accepted)),
        ("taken", json!(taking.first.len())),
        ("taken_twice", json!(duplicates)),
        ("missing", json!(handoff.missing)),
        ("unknown", json!(handoff.unknown)),
        ("takes", json!(taking.takes)),
        ("empty_takes", json!(taking.empty_takes)),
        ("acked", json!(taking.acked)),
        ("stale", json!(taking.stale)),
        (
            "consumer_errors",
            json!(taking.errors + taking.other_status),
        ),
        ("consumer_reconnects", json!(taking.reconnects)),
        ("ingest_p50_ms", json!(round(load.quantile_ms(0.5), 3))),
        ("ingest_p99_ms", json!(round(load.quantile_ms(0.99), 3))),
        ("ingest_errors", json!(load.total.errors)),
        ("server_cpu_pct", json!(server_cpu.map(|(_, pct)| pct))),
        ("idle_rss_mib", json!(mib(idle_kib))),
        (
            "startup_ms",
            json!(round(startup.as_secs_f64() * 1000.0, 1)),
        ),
        ("shutdown_ms", json!(exit.shutdown.as_millis() as u64)),
        ("exit_code", json!(exit.status.code())),
        ("server_log_warnings", json!(warnings)),
    ];
    fields.extend(stored.fields());
    print_json(&scenario, super::Mode::Latency, &args.durability, fields);

    for s in taking.samples.iter().chain(&load.samples) {
        eprintln!("  example: {s}");
    }
    let mut checks = Checks::default();
    checks.expect(all_taken && handoff.missing == 0, || {
        format!(
            "{} events answered 202 were never taken (waited {} s after the ingest)",
            handoff.missing, args.drain_timeout
        )
    });
    checks.expect(duplicates == 0 && taking.stale == 0, || {
        format!(
            "{duplicates} events were handed out twice, {} acks were stale",
            taking.stale
        )
    });
    checks.expect(taking.acked == taking.first.len() as u64, || {
        format!(
            "acked {} of the {} events taken",
            taking.acked,
            taking.first.len()
        )
    });
    checks.expect(
        taking.errors + taking.other_status + handoff.unknown == 0,
        || {
            format!(
                "the consumer saw {} failed requests, {} unexpected statuses, {} ids never accepted",
                taking.errors, taking.other_status, handoff.unknown
            )
        },
    );
    checks.expect(load.total.errors == 0 && !load.anomalies.any(), || {
        format!(
            "posting events: {} failed requests, answers that broke the contract: {}",
            load.total.errors,
            load.anomalies.any()
        )
    });
    checks.expect(exit.status.code() == Some(0), || {
        format!(
            "the server exited with {:?} after SIGTERM (expected 0)",
            exit.status.code()
        )
    });
    stored.check(accepted, &mut checks);
    let ok = checks.finish();
    if !ok {
        eprintln!("server log (tail):\n{}", server.log_tail(40));
    }
    Ok(ok)
}
