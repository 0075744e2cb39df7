//! `pull_listen`: the real `hookbox listen` draining a stored backlog.
//!
//! `--events` events are stored first (over `--connections` connections,
//! as fast as the server takes them); then `hookbox listen --once` (the
//! same release binary) takes them from the pull destination and forwards
//! each to the local downstream, which answers 204 and checks that every
//! body is byte for byte the one sent. The rate is events over the time
//! from starting `listen` to its exit. The run checks that the downstream
//! got every stored event exactly once, `listen` printed one line per
//! event and exited 0, and every row ends `delivered`.
//!
//! [`ListenChild`] is also what `--deliver --listen` runs (the ingest
//! variant, `pull_listen_ingest`): `listen` without `--once`, stopped with
//! SIGINT once the downstream has everything.

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tempfile::TempDir;
use tokio::process::{Child, Command};

use super::{
    Checks, CpuWindow, DESTINATION, SOURCE, Stored, TOKEN, fill, log_warnings, print_json,
};
use crate::downstream::{Check, Downstream};
use crate::payload::Signer;
use crate::server::{SECRET, Server, clock_ticks_per_sec, proc_cpu, proc_status_kib};
use crate::{Args, IDLE_SETTLE, mib, round};

/// The downstream path `listen` forwards to.
pub const PATH: &str = "/hook";

/// Beyond `--drain-timeout`, what storing the events and `listen` each get
/// per event before the run gives up on them (200 events/s).
const PER_EVENT: Duration = Duration::from_millis(5);

/// How often the CPU time of a running `listen` is read.
const CPU_SAMPLE: Duration = Duration::from_millis(20);

/// A running `hookbox listen`, its output kept in files.
pub struct ListenChild {
    child: Child,
    pid: u32,
    stdout: PathBuf,
    stderr: PathBuf,
    started: Instant,
    /// CPU time at the last sample: /proc forgets the process once it exits.
    cpu: Option<Duration>,
    _dir: TempDir,
}

/// How a `listen` ended.
pub struct ListenExit {
    /// `None`: killed by a signal.
    pub code: Option<i32>,
    /// From spawn to exit.
    pub wall: Duration,
    /// CPU time, as last sampled before the exit.
    pub cpu: Option<Duration>,
}

impl ListenExit {
    pub fn cpu_pct(&self) -> Option<f64> {
        self.cpu
            .map(|c| round(c.as_secs_f64() / self.wall.as_secs_f64() * 100.0, 1))
    }
}

impl ListenChild {
    /// Starts `binary listen` against the server at `server`, forwarding to
    /// the URL `forward_to`; `max` is its `--max` (its own default when
    /// `None`).
    pub fn spawn(
        binary: &Path,
        server: SocketAddr,
        forward_to: &str,
        once: bool,
        max: Option<u16>,
    ) -> Result<ListenChild> {
        let dir = tempfile::Builder::new()
            .prefix("hookbox-bench-listen-")
            .tempdir()
            .context("creating the temp dir for listen's output")?;
        let (stdout, stderr) = (dir.path().join("stdout"), dir.path().join("stderr"));
        let file = |p: &Path| {
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))
        };
        let mut cmd = Command::new(binary);
        cmd.arg("listen")
            .arg("--url")
            .arg(format!("http://{server}"))
            .args(["--source", SOURCE, "--destination", DESTINATION])
            .args(["--forward-to", forward_to])
            .env("HOOKBOX_PULL_TOKEN", TOKEN)
            .stdin(Stdio::null())
            .stdout(file(&stdout)?)
            .stderr(file(&stderr)?)
            .kill_on_drop(true);
        if once {
            cmd.arg("--once");
        }
        if let Some(max) = max {
            cmd.arg("--max").arg(max.to_string());
        }
        let started = Instant::now();
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {} listen", binary.display()))?;
        let pid = child
            .id()
            .context("listen exited before its pid was read")?;
        Ok(ListenChild {
            child,
            pid,
            stdout,
            stderr,
            started,
            cpu: None,
            _dir: dir,
        })
    }

    /// Waits up to `cap` for `listen` to exit by itself, reading its CPU
    /// time as it runs; kills it after that and reports the timeout.
    pub async fn wait(&mut self, cap: Duration) -> Result<ListenExit> {
        let ticks = clock_ticks_per_sec();
        let until = self.started + cap;
        loop {
            if let Some(status) = self.child.try_wait().context("polling listen")? {
                return Ok(ListenExit {
                    code: status.code(),
                    wall: self.started.elapsed(),
                    cpu: self.cpu,
                });
            }
            if Instant::now() > until {
                self.child.kill().await.context("killing listen")?;
                bail!(
                    "listen did not finish within {cap:?} (killed); its stderr:\n{}",
                    self.stderr_tail(20)
                );
            }
            if let Ok(cpu) = proc_cpu(self.pid, ticks) {
                self.cpu = Some(cpu);
            }
            tokio::time::sleep(CPU_SAMPLE).await;
        }
    }

    /// SIGINT, as Ctrl-C sends: `listen` gives back what it holds and
    /// exits; waits up to `grace`.
    pub async fn interrupt(&mut self, grace: Duration) -> Result<ListenExit> {
        let ticks = clock_ticks_per_sec();
        if let Ok(cpu) = proc_cpu(self.pid, ticks) {
            self.cpu = Some(cpu);
        }
        let sent = std::process::Command::new("kill")
            .arg("-INT")
            .arg(self.pid.to_string())
            .status()
            .context("running kill -INT")?;
        if !sent.success() {
            bail!("kill -INT {} failed: {sent}", self.pid);
        }
        let cap = self.started.elapsed() + grace;
        self.wait(cap).await
    }

    /// Lines `listen` printed for events (`<time> github <type> <delivery
    /// id> <event id> <status> <ms>ms`), and how many of them say 204.
    pub fn event_lines(&self) -> (u64, u64) {
        let text = std::fs::read_to_string(&self.stdout).unwrap_or_default();
        event_lines(&text)
    }

    pub fn stderr_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

fn event_lines(text: &str) -> (u64, u64) {
    let mut lines = 0;
    let mut no_content = 0;
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() >= 7 && fields[1] == SOURCE && fields[fields.len() - 1].ends_with("ms") {
            lines += 1;
            no_content += u64::from(fields[5] == "204");
        }
    }
    (lines, no_content)
}

pub async fn run(args: &Args, binary: &Path, nonce: u64) -> Result<bool> {
    let scenario = args.scenario();
    let signer = Arc::new(Signer::new(SECRET.as_bytes(), nonce)?);
    let mut downstream =
        Downstream::start(vec![(PATH.to_owned(), Check::Body(Arc::clone(&signer)))])?;
    let (mut server, _startup) = Server::start(
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

    let cap = Duration::from_secs_f64(args.drain_timeout) + PER_EVENT.mul_f64(args.events as f64);
    let filled = fill(server.public, signer, args.events, args.connections, cap).await?;
    let stored_per_sec = filled.ids.len() as f64 / filled.wall.as_secs_f64();

    let cpu = CpuWindow::start(pid);
    let forward_to = format!("http://{}{PATH}", downstream.addr);
    let mut listen = ListenChild::spawn(binary, server.public, &forward_to, true, args.listen_max)?;
    let exit = listen.wait(cap).await?;
    let server_cpu = cpu.used();
    let peak_kib = proc_status_kib(pid, "VmHWM").ok();
    downstream.stop();
    let (lines, lines_204) = listen.event_lines();

    let seen = downstream.with_seen(0, |seen| {
        let missing = filled
            .ids
            .iter()
            .filter(|id| !seen.first.contains_key(*id))
            .count() as u64;
        let unknown = seen
            .first
            .keys()
            .filter(|id| !filled.ids.contains(*id))
            .count() as u64;
        let span = match (seen.arrivals.first(), seen.arrivals.last()) {
            (Some(a), Some(b)) => b.at.saturating_duration_since(a.at),
            _ => Duration::ZERO,
        };
        Seen {
            requests: seen.arrivals.len() as u64,
            distinct: seen.first.len() as u64,
            missing,
            unknown,
            bad_bodies: seen.bad_signature + seen.body_errors,
            no_id: seen.no_id,
            span,
        }
    });
    let server_exit = server
        .stop(Duration::from_secs_f64(args.stop_timeout))
        .await?;
    let stored = Stored::read(&server.database)?;
    let n = filled.ids.len() as u64;
    let per_sec = round(seen.distinct as f64 / exit.wall.as_secs_f64(), 1);
    let span_per_sec = (seen.span > Duration::ZERO).then(|| {
        round(
            seen.distinct.saturating_sub(1) as f64 / seen.span.as_secs_f64(),
            1,
        )
    });

    println!(
        "{scenario}: {n} events stored at {} /s, then `hookbox listen --once{}` | {per_sec} events/s ({} s from start to exit; first to last arrival {} /s) | downstream {} requests {} ids {} duplicates {} missing {} bad bodies | listen printed {lines} lines ({lines_204} x 204), exit {:?}, cpu {} | server cpu {} | rss idle {} MiB peak {} MiB",
        round(stored_per_sec, 0),
        args.listen_max
            .map_or(String::new(), |m| format!(" --max {m}")),
        round(exit.wall.as_secs_f64(), 3),
        span_per_sec.map_or("-".to_owned(), |r| r.to_string()),
        seen.requests,
        seen.distinct,
        seen.requests - seen.distinct,
        seen.missing,
        seen.bad_bodies,
        exit.code,
        exit.cpu_pct().map_or("?".to_owned(), |p| format!("{p}%")),
        server_cpu.map_or("?".to_owned(), |(_, pct)| format!("{pct}%")),
        mib(idle_kib),
        peak_kib.map_or("?".to_owned(), |k| mib(k).to_string()),
    );
    println!("  {}", stored.line());
    let warnings = log_warnings(&server.log_text());
    let mut fields: Vec<(&'static str, Value)> = vec![
        ("events", json!(n)),
        ("listen_per_sec", json!(per_sec)),
        ("listen_secs", json!(round(exit.wall.as_secs_f64(), 3))),
        ("arrival_span_per_sec", json!(span_per_sec)),
        ("listen_max", json!(args.listen_max)),
        ("downstream_requests", json!(seen.requests)),
        ("downstream_distinct", json!(seen.distinct)),
        (
            "downstream_duplicates",
            json!(seen.requests - seen.distinct),
        ),
        ("downstream_missing", json!(seen.missing)),
        ("downstream_unknown", json!(seen.unknown)),
        ("bad_bodies", json!(seen.bad_bodies)),
        ("listen_lines", json!(lines)),
        ("listen_lines_204", json!(lines_204)),
        ("listen_exit_code", json!(exit.code)),
        ("listen_cpu_pct", json!(exit.cpu_pct())),
        ("server_cpu_pct", json!(server_cpu.map(|(_, pct)| pct))),
        ("stored_per_sec", json!(round(stored_per_sec, 1))),
        ("store_503s", json!(filled.unavailable)),
        ("store_errors", json!(filled.errors)),
        ("idle_rss_mib", json!(mib(idle_kib))),
        ("peak_rss_mib", json!(peak_kib.map(mib))),
        (
            "shutdown_ms",
            json!(server_exit.shutdown.as_millis() as u64),
        ),
        ("exit_code", json!(server_exit.status.code())),
        ("server_log_warnings", json!(warnings)),
    ];
    fields.extend(stored.fields());
    print_json(&scenario, super::Mode::Listen, &args.durability, fields);

    let mut checks = Checks::default();
    checks.expect(exit.code == Some(0), || {
        format!(
            "listen exited with {:?}; its stderr:\n{}",
            exit.code,
            listen.stderr_tail(20)
        )
    });
    checks.expect(seen.missing == 0 && seen.distinct == n, || {
        format!(
            "{} of the {n} stored events never reached the downstream",
            seen.missing
        )
    });
    checks.expect(seen.requests == seen.distinct, || {
        format!(
            "the downstream got {} events more than once",
            seen.requests - seen.distinct
        )
    });
    checks.expect(seen.bad_bodies + seen.no_id + seen.unknown == 0, || {
        format!(
            "the downstream got {} bodies that are not the ones sent, {} requests without a delivery id, {} ids never stored",
            seen.bad_bodies, seen.no_id, seen.unknown
        )
    });
    checks.expect(lines == n && lines_204 == n, || {
        format!("listen printed {lines} event lines ({lines_204} with 204) for {n} events")
    });
    checks.expect(server_exit.status.code() == Some(0), || {
        format!(
            "the server exited with {:?} after SIGTERM (expected 0)",
            server_exit.status.code()
        )
    });
    stored.check(n, &mut checks);
    let ok = checks.finish();
    if !ok {
        eprintln!("server log (tail):\n{}", server.log_tail(40));
    }
    Ok(ok)
}

/// What the downstream got, joined with the stored ids.
struct Seen {
    requests: u64,
    distinct: u64,
    missing: u64,
    unknown: u64,
    bad_bodies: u64,
    no_id: u64,
    /// First to last arrival.
    span: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_lines_are_counted_with_their_status_and_other_output_is_not() {
        let out = "\
2026-12-01T10:00:00Z github push 0a-1 1 204 3ms
2026-12-01T10:00:00Z github push 0a-2 2 500 1ms
2026-12-01T10:00:01Z github push 0a-3 3 failed (connection refused) 1ms
listening to http://127.0.0.1:1 (source github, destination pull)
";
        assert_eq!(event_lines(out), (3, 1));
    }

    #[test]
    fn listen_cpu_is_a_share_of_its_wall_time() {
        let exit = ListenExit {
            code: Some(0),
            wall: Duration::from_secs(2),
            cpu: Some(Duration::from_millis(500)),
        };
        assert_eq!(exit.cpu_pct(), Some(25.0));
    }
}
