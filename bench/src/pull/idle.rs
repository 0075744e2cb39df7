//! `pull_idle`: what waiting long-polls cost the server.
//!
//! Three phases on one server, whose pull destination's edge allows
//! `--long-polls` + 16 long-polls per address (they all come from
//! 127.0.0.1):
//!
//! 1. `none`: `--duration` seconds with no client at all: the server's CPU
//!    time (from /proc) and its resident memory at the end.
//! 2. `held`: `--long-polls` consumers each hold a take (`max=10`,
//!    `wait=20s`) open, asking again when one ends, for `--duration`
//!    seconds: the same figures. The difference is what waiting costs.
//! 3. `events`: one event every 20 ms for [`PROBE`] while they all wait:
//!    every insert wakes every waiting take of the destination, one of them
//!    gets the event, the others look and wait again. The hand-off latency
//!    (202 to the answer) and the server's CPU show what that costs.
//!
//! Once every event is taken and acked, the server gets SIGTERM while the
//! long-polls still wait (as when it restarts under its consumers): the
//! time it takes to exit is reported, not checked. The run checks that
//! every long-poll was held, every event was taken once and every row ends
//! `delivered`.

use anyhow::{Context, Result};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::consumers::Consumers;
use super::{Checks, CpuWindow, Handoff, Latencies, Stored, TAKE_WAIT, log_warnings, print_json};
use crate::load::{self, LoadConfig, Receipts};
use crate::payload::Signer;
use crate::server::{SECRET, Server, proc_status_kib};
use crate::{Args, IDLE_PACE_MS, IDLE_SETTLE, round};

/// Long-polls the edge allows beyond the consumers', for slack.
const EDGE_SLACK: u32 = 16;
/// After the consumers start, before the `held` phase: time for every
/// take to reach the server and wait.
const POLLS_SETTLE: Duration = Duration::from_secs(1);
/// How long the `events` phase posts.
const PROBE: Duration = Duration::from_secs(2);

/// The server's CPU and memory over one phase.
struct Phase {
    cpu_secs: Option<f64>,
    cpu_pct: Option<f64>,
    /// VmRSS at the end of the phase.
    rss_kib: u64,
}

async fn phase(pid: u32, length: Duration) -> Result<Phase> {
    let cpu = CpuWindow::start(pid);
    tokio::time::sleep(length).await;
    let used = cpu.used();
    Ok(Phase {
        cpu_secs: used.map(|(secs, _)| secs),
        cpu_pct: used.map(|(_, pct)| pct),
        rss_kib: proc_status_kib(pid, "VmRSS").context("reading VmRSS")?,
    })
}

pub async fn run(args: &Args, binary: &Path, nonce: u64) -> Result<bool> {
    let scenario = args.scenario();
    let polls = args.long_polls;
    let (mut server, _startup) = Server::start(
        binary,
        &args.durability,
        !args.no_search,
        &super::destination(Some(polls + EDGE_SLACK)),
    )
    .await?;
    if args.keep {
        eprintln!("keeping {}", server.keep_dir().display());
    }
    let pid = server.pid();
    let length = Duration::from_secs_f64(args.duration);
    tokio::time::sleep(IDLE_SETTLE).await;

    let none = phase(pid, length).await?;

    let consumers = Consumers::start(server.public, polls)?;
    tokio::time::sleep(POLLS_SETTLE).await;
    let (waiting_before, answered_before) = (consumers.waiting(), consumers.answered());
    let held = phase(pid, length).await?;
    let reissued = consumers.answered() - answered_before;
    // A take that just ended is asked again at once: give it a moment.
    let mut waiting_after = consumers.waiting();
    for _ in 0..100 {
        if waiting_after >= u64::from(polls) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        waiting_after = consumers.waiting();
    }

    let receipts = Arc::new(Receipts::default());
    let cfg = LoadConfig {
        addr: server.public,
        connections: 1,
        warmup: Duration::ZERO,
        duration: PROBE,
        duplicates: 0.0,
        request_timeout: Duration::from_secs_f64(args.request_timeout),
        signer: Arc::new(Signer::new(SECRET.as_bytes(), nonce)?),
        seed: nonce.rotate_left(17),
        pace: Some(Duration::from_secs_f64(IDLE_PACE_MS / 1000.0)),
        receipts: Some(Arc::clone(&receipts)),
    };
    let cpu = CpuWindow::start(pid);
    let load = load::run(Arc::new(cfg)).await;
    let probe_cpu = cpu.used();
    let all_taken = consumers
        .wait_for(&receipts, Duration::from_secs_f64(args.drain_timeout))
        .await;
    // SIGTERM while the long-polls wait, as when the server restarts
    // under its consumers; what they see from then on is not counted.
    let failures = consumers.failures();
    let waiting_at_stop = consumers.waiting();
    let exit = server
        .stop(Duration::from_secs_f64(args.stop_timeout))
        .await?;
    let taking = consumers.stop();
    let load = load?;
    let stored = Stored::read(&server.database)?;
    let handoff = Handoff::join(&receipts, &taking.first, load.window);
    let latencies = Latencies::new(handoff.latencies_us.clone());
    let accepted = load.total.accepted;
    let twice = taking.twice();
    let delta_kib = i64::try_from(held.rss_kib).unwrap_or(i64::MAX)
        - i64::try_from(none.rss_kib).unwrap_or(i64::MAX);
    let delta_mib = round(delta_kib as f64 / 1024.0, 2);
    let mib2 = |kib: u64| round(kib as f64 / 1024.0, 2);
    let show = |v: Option<f64>| v.map_or("?".to_owned(), |v| v.to_string());

    println!(
        "{scenario}: {polls} long-polls (wait={}s) | none: cpu {} s ({}%) rss {} MiB | held {}s: cpu {} s ({}%) rss {} MiB, delta {delta_mib} MiB, {waiting_after}/{polls} waiting, {reissued} re-issued | {accepted} events 20 ms apart while they wait: 202 -> take answered p50 {} ms p99 {} ms max {} ms ({} before the 202), their 202s p50 {} ms p99 {} ms, server cpu {}%, {twice} taken twice, {} missing | SIGTERM with {waiting_at_stop} waiting: exit {:?} in {} ms",
        TAKE_WAIT.as_secs(),
        show(none.cpu_secs),
        show(none.cpu_pct),
        mib2(none.rss_kib),
        args.duration,
        show(held.cpu_secs),
        show(held.cpu_pct),
        mib2(held.rss_kib),
        latencies.show(0.5),
        latencies.show(0.99),
        latencies.show(1.0),
        handoff.before_202,
        round(load.quantile_ms(0.5), 3),
        round(load.quantile_ms(0.99), 3),
        show(probe_cpu.map(|(_, pct)| pct)),
        handoff.missing,
        exit.status.code(),
        exit.shutdown.as_millis(),
    );
    println!("  {}", stored.line());
    let warnings = log_warnings(&server.log_text());
    let mut fields: Vec<(&'static str, Value)> = vec![
        ("long_polls", json!(polls)),
        ("duration", json!(args.duration)),
        ("none_cpu_secs", json!(none.cpu_secs)),
        ("none_cpu_pct", json!(none.cpu_pct)),
        ("held_cpu_secs", json!(held.cpu_secs)),
        ("held_cpu_pct", json!(held.cpu_pct)),
        ("none_rss_mib", json!(mib2(none.rss_kib))),
        ("held_rss_mib", json!(mib2(held.rss_kib))),
        ("rss_delta_mib", json!(delta_mib)),
        ("waiting_at_start", json!(waiting_before)),
        ("waiting_at_end", json!(waiting_after)),
        ("reissued", json!(reissued)),
        ("probe_events", json!(accepted)),
        ("probe_handoff_p50_ms", json!(latencies.ms(0.5))),
        ("probe_handoff_p99_ms", json!(latencies.ms(0.99))),
        ("probe_handoff_max_ms", json!(latencies.ms(1.0))),
        ("probe_taken_before_202", json!(handoff.before_202)),
        (
            "probe_ingest_p50_ms",
            json!(round(load.quantile_ms(0.5), 3)),
        ),
        (
            "probe_ingest_p99_ms",
            json!(round(load.quantile_ms(0.99), 3)),
        ),
        ("probe_cpu_pct", json!(probe_cpu.map(|(_, pct)| pct))),
        ("taken_twice", json!(twice)),
        ("missing", json!(handoff.missing)),
        ("acked", json!(taking.acked)),
        ("stale", json!(taking.stale)),
        ("consumer_errors", json!(failures)),
        ("waiting_at_sigterm", json!(waiting_at_stop)),
        ("shutdown_ms", json!(exit.shutdown.as_millis() as u64)),
        ("exit_code", json!(exit.status.code())),
        ("server_log_warnings", json!(warnings)),
    ];
    fields.extend(stored.fields());
    print_json(&scenario, super::Mode::Idle, &args.durability, fields);

    // The consumers' own samples only tell something when they failed
    // before the SIGTERM (after it, every one does).
    let samples = if failures > 0 {
        &taking.samples[..]
    } else {
        &[]
    };
    for s in samples.iter().chain(&load.samples) {
        eprintln!("  example: {s}");
    }
    let mut checks = Checks::default();
    let held_all = u64::from(polls);
    checks.expect(
        waiting_before == held_all && waiting_after == held_all,
        || {
            format!(
                "{waiting_before} then {waiting_after} of the {polls} long-polls were waiting (the others were refused or failed)"
            )
        },
    );
    checks.expect(failures == 0, || {
        format!("the consumers saw {failures} failed requests or unexpected statuses")
    });
    checks.expect(all_taken && handoff.missing == 0, || {
        format!("{} events answered 202 were never taken", handoff.missing)
    });
    checks.expect(twice == 0 && taking.stale == 0, || {
        format!(
            "{twice} events were handed out twice, {} acks were stale",
            taking.stale
        )
    });
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
