//! The hookbox server under test: writes its config into a temp dir, starts
//! the real release binary as a child process, waits for `/readyz`, reads its
//! memory from `/proc`, stops it with SIGTERM and counts the rows it stored.
//!
//! The child is spawned with `kill_on_drop`, so an error anywhere in the load
//! generator never leaves a server running.

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

use crate::payload::{PARITY_POINTER, Parity};

/// The webhook secret of the bench's `github` source.
pub const SECRET: &str = "bench-secret";

/// How long start-up may take before the run is abandoned.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Interval between `/readyz` probes.
const READY_POLL: Duration = Duration::from_millis(2);

pub struct Server {
    child: Child,
    pid: u32,
    /// The public listener, where `/hooks/github` and `/readyz` live.
    pub public: SocketAddr,
    /// The admin listener, where `/api/...` lives.
    admin: SocketAddr,
    pub database: PathBuf,
    log: PathBuf,
    /// Kept so the directory lives as long as the server; `None` once kept.
    dir: Option<TempDir>,
    dir_path: PathBuf,
}

/// How the server ended after SIGTERM.
pub struct Exit {
    pub status: ExitStatus,
    /// From SIGTERM to the process having exited.
    pub shutdown: Duration,
}

/// Lets the disk finish with what earlier runs deleted before a run
/// starts. On a file system mounted with `discard` (this benchmark's VM:
/// ext4, `-o discard`), the blocks of the previous run's database (a few
/// hundred MiB) are trimmed at the next journal commit, and a run started
/// right after waited 0.1-1 s on some of its WAL fsyncs (the server's
/// `hookbox_wal_sync_duration_seconds` shows them): about one run in five
/// had a p99 or p99.9 of 80-830 ms from that alone, none of six in a row
/// once `sync` and a pause came first.
async fn settle_disk() {
    let _ = tokio::process::Command::new("sync").status().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
}

impl Server {
    /// Writes the config and spawns `binary serve --config ..`; returns the
    /// server once `/readyz` on the public port answers 200, with the time
    /// that took since spawn.
    ///
    /// `deliver` says where the source's events go; every deliver setting
    /// it does not name keeps its default.
    pub async fn start(
        binary: &Path,
        durability: &str,
        search: bool,
        deliver: &Deliver,
    ) -> Result<(Server, Duration)> {
        settle_disk().await;
        let dir = tempfile::Builder::new()
            .prefix("hookbox-bench-")
            .tempdir()
            .context("creating the temp dir")?;
        let dir_path = dir.path().to_path_buf();
        let (public, admin) = two_free_ports()?;
        let database = dir_path.join("hookbox.db");
        let config = dir_path.join("hookbox.toml");
        let mut toml = config_toml(public, admin, &database, durability, search);
        match deliver {
            Deliver::Nowhere => {}
            Deliver::One {
                url,
                signing_secret,
                transform,
                concurrency,
            } => {
                toml.push_str(&deliver_toml(url, signing_secret));
                if let Some(program) = transform {
                    toml.push_str(&format!("transform = {program:?}\n"));
                }
                if let Some(n) = concurrency {
                    toml.push_str(&format!("concurrency = {n}\n"));
                }
            }
            Deliver::Routes(routes) => toml.push_str(&routes_toml(routes)),
            Deliver::Pull(pull) => toml.push_str(&pull_toml(pull)),
            Deliver::Protected(p) => toml.push_str(&protected_toml(p)),
            Deliver::Broker(kind, concurrency) => {
                toml.push_str(&format!("\n[sources.deliver]\n{kind}\n"));
                if let Some(n) = concurrency {
                    toml.push_str(&format!("concurrency = {n}\n"));
                }
            }
        }
        std::fs::write(&config, toml).with_context(|| format!("writing {}", config.display()))?;
        let log = dir_path.join("server.log");
        let log_file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let log_err = log_file
            .try_clone()
            .context("duplicating the log file handle")?;

        let spawned_at = Instant::now();
        let child = Command::new(binary)
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(log_err)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let pid = child
            .id()
            .context("the server exited before its pid was read")?;
        let mut server = Server {
            child,
            pid,
            public,
            admin,
            database,
            log,
            dir: Some(dir),
            dir_path,
        };
        server.wait_ready(spawned_at).await?;
        Ok((server, spawned_at.elapsed()))
    }

    async fn wait_ready(&mut self, spawned_at: Instant) -> Result<()> {
        loop {
            if let Some(status) = self
                .child
                .try_wait()
                .context("polling the server process")?
            {
                bail!(
                    "the server exited during start-up ({status}); its log:\n{}",
                    self.log_tail(40)
                );
            }
            if probe_ready(self.public).await {
                return Ok(());
            }
            if spawned_at.elapsed() > READY_TIMEOUT {
                bail!(
                    "GET /readyz on {} did not answer 200 within {READY_TIMEOUT:?}; server log:\n{}",
                    self.public,
                    self.log_tail(40)
                );
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// One `POST path` on the admin listener with the token hookbox
    /// generated next to its database; an answer other than 200 is an
    /// error.
    pub async fn admin_post(&self, path: &str) -> Result<()> {
        let token = std::fs::read_to_string(self.dir_path.join("admin-token"))
            .context("reading the generated admin token")?;
        let mut sender = crate::load::connect(self.admin).await?;
        let request = Request::post(path)
            .header("host", self.admin.to_string())
            .header("authorization", format!("Bearer {}", token.trim()))
            .body(http_body_util::Full::new(Bytes::new()))
            .context("an admin request")?;
        let (status, body) = crate::load::send(&mut sender, request).await?;
        if status != StatusCode::OK {
            bail!(
                "POST {path} answered {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            );
        }
        Ok(())
    }

    /// Keeps the temp dir (config, database, log) after the run and returns
    /// its path.
    pub fn keep_dir(&mut self) -> PathBuf {
        if let Some(dir) = self.dir.take() {
            // Dropping the returned path keeps the directory on disk.
            let _ = dir.keep();
        }
        self.dir_path.clone()
    }

    /// The whole server log (stdout and stderr) so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `lines` lines of the server's stdout and stderr.
    pub fn log_tail(&self, lines: usize) -> String {
        match std::fs::read_to_string(&self.log) {
            Ok(text) => {
                let all: Vec<&str> = text.lines().collect();
                let from = all.len().saturating_sub(lines);
                all[from..].join("\n")
            }
            Err(e) => format!("(cannot read {}: {e})", self.log.display()),
        }
    }

    /// Sends SIGTERM and waits up to `grace` for the process to exit; kills
    /// it with SIGKILL after that and reports the timeout as an error.
    pub async fn stop(&mut self, grace: Duration) -> Result<Exit> {
        let sent_at = Instant::now();
        let kill = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(self.pid.to_string())
            .status()
            .context("running kill -TERM")?;
        if !kill.success() {
            bail!("kill -TERM {} failed: {kill}", self.pid);
        }
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(status) => Ok(Exit {
                status: status.context("waiting for the server to exit")?,
                shutdown: sent_at.elapsed(),
            }),
            Err(_) => {
                self.child
                    .kill()
                    .await
                    .context("killing the server after the SIGTERM grace period")?;
                bail!(
                    "the server did not exit within {grace:?} of SIGTERM (killed); log:\n{}",
                    self.log_tail(40)
                )
            }
        }
    }
}

fn config_toml(
    public: SocketAddr,
    admin: SocketAddr,
    database: &Path,
    durability: &str,
    search: bool,
) -> String {
    // `{:?}` quotes and escapes the path the way a TOML basic string expects
    // for any path a temp dir produces.
    format!(
        r#"[server]
listen = "{public}"
admin_listen = "{admin}"
database = {database:?}
durability = "{durability}"

[search]
enabled = {search}

[[sources]]
name = "github"
kind = "github"
secrets = ["{SECRET}"]
"#,
        database = database.display().to_string(),
    )
}

/// Where the bench's source delivers.
pub enum Deliver {
    /// No destination: events are only stored.
    Nowhere,
    /// The single `[sources.deliver]` table (the destination `default`),
    /// as every hookbox version reads it.
    One {
        url: String,
        signing_secret: String,
        /// A jq program for `transform` (the transform scenario).
        transform: Option<String>,
        /// `concurrency`; `None`: the default.
        concurrency: Option<usize>,
    },
    /// `[[sources.deliver]]`: named destinations, each with its filter.
    Routes(Vec<Route>),
    /// One `pull` destination: consumers take its events.
    Pull(Pull),
    /// The single `[sources.deliver]` table with the settings that protect
    /// the destination, on a source with an `order_key` (the outage
    /// scenario).
    Protected(Protected),
    /// The single `[sources.deliver]` table with a broker kind: its one
    /// line, `nats = { url = .., subject = .. }` and the like, and its
    /// `concurrency` (`None`: the kind's default).
    Broker(String, Option<usize>),
}

/// A url destination with its rate and circuit breaker, and the source's
/// order key. `None` leaves a setting at its default.
pub struct Protected {
    pub url: String,
    pub signing_secret: String,
    /// The JSON pointer of the source's `order_key`.
    pub order_key: String,
    /// `rate`, as the config takes it (`"500/s"`).
    pub rate: Option<String>,
    pub breaker_failures: Option<u32>,
    /// `breaker_probe`, as the config takes it (`"5s"`).
    pub breaker_probe: Option<String>,
}

/// A `pull` destination of the bench's source, with default settings.
pub struct Pull {
    pub name: String,
    /// The bearer token consumers send (16+ characters).
    pub token: String,
    /// `[edge] max_client_long_polls`, when the default (16 per address)
    /// is too few: every long-poll of the bench comes from 127.0.0.1.
    pub max_client_long_polls: Option<u32>,
}

/// One named url destination of `[[sources.deliver]]`.
pub struct Route {
    pub name: String,
    pub url: String,
    pub signing_secret: String,
    /// `None`: every event. `Some(p)`: push events whose body holds `p` at
    /// [`PARITY_POINTER`], half of them.
    pub only: Option<Parity>,
}

/// The `[sources.deliver]` table of the bench's source, appended after
/// [`config_toml`]: a url destination with default settings.
fn deliver_toml(url: &str, signing_secret: &str) -> String {
    format!(
        r#"
[sources.deliver]
url = {url:?}
signing_secret = {signing_secret:?}
"#
    )
}

/// The `[[sources.deliver]]` tables of the bench's source, appended after
/// [`config_toml`]: url destinations with default settings, each with its
/// filter. A filter on half the events is written the way a user would
/// route pushes to one branch: the event type and a value in the body.
fn routes_toml(routes: &[Route]) -> String {
    let mut toml = String::new();
    for r in routes {
        let (name, url, secret) = (&r.name, &r.url, &r.signing_secret);
        toml.push_str(&format!(
            r#"
[[sources.deliver]]
name = {name:?}
url = {url:?}
signing_secret = {secret:?}
"#
        ));
        if let Some(parity) = r.only {
            toml.push_str(&format!(
                "events = [\"push\"]\nwhen = {{ {PARITY_POINTER:?} = {:?} }}\n",
                parity.as_str()
            ));
        }
    }
    toml
}

/// The source's `order_key` and its `[sources.deliver]` table, appended
/// after [`config_toml`] (whose last table is the source, so the key still
/// belongs to it). Backoff, concurrency and attempts keep their defaults.
fn protected_toml(p: &Protected) -> String {
    let (pointer, url, secret) = (&p.order_key, &p.url, &p.signing_secret);
    let mut toml = format!(
        r#"order_key = [{pointer:?}]

[sources.deliver]
url = {url:?}
signing_secret = {secret:?}
"#
    );
    if let Some(rate) = &p.rate {
        toml.push_str(&format!("rate = {rate:?}\n"));
    }
    if let Some(n) = p.breaker_failures {
        toml.push_str(&format!("breaker_failures = {n}\n"));
    }
    if let Some(probe) = &p.breaker_probe {
        toml.push_str(&format!("breaker_probe = {probe:?}\n"));
    }
    toml
}

/// The `[[sources.deliver]]` table of a pull destination, appended after
/// [`config_toml`], and the `[edge]` table when the run needs more
/// long-polls than an address may hold by default.
fn pull_toml(pull: &Pull) -> String {
    let (name, token) = (&pull.name, &pull.token);
    let mut toml = format!(
        r#"
[[sources.deliver]]
name = {name:?}
pull = {{ token = {token:?} }}
"#
    );
    if let Some(n) = pull.max_client_long_polls {
        toml.push_str(&format!("\n[edge]\nmax_client_long_polls = {n}\n"));
    }
    toml
}

/// Two distinct free loopback ports: both listeners are held until both
/// ports are known, then dropped so the server can bind them.
fn two_free_ports() -> Result<(SocketAddr, SocketAddr)> {
    let a = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    let b = TcpListener::bind("127.0.0.1:0").context("finding a second free port")?;
    Ok((
        a.local_addr().context("reading a bound address")?,
        b.local_addr().context("reading a bound address")?,
    ))
}

/// One `GET /readyz` on a fresh connection; true only for a 200.
async fn probe_ready(addr: SocketAddr) -> bool {
    let probe = async {
        let stream = TcpStream::connect(addr).await?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let req = Request::get("/readyz")
            .header(hyper::header::HOST, addr.to_string())
            .body(Empty::<Bytes>::new())?;
        let resp = sender.send_request(req).await?;
        let status = resp.status();
        resp.into_body().collect().await?;
        anyhow::Ok(status)
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(1), probe).await,
        Ok(Ok(StatusCode::OK))
    )
}

/// A `/proc/<pid>/status` field in KiB (`VmRSS`, `VmHWM`).
pub fn proc_status_kib(pid: u32, field: &str) -> Result<u64> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    text.lines()
        .find_map(|line| {
            let rest = line.strip_prefix(field)?.strip_prefix(':')?;
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .with_context(|| format!("no {field} line in {path}"))
}

/// CPU time of `pid`, the children it reaped, and its live children (the
/// transform processes of a server).
pub fn proc_tree_cpu(pid: u32, ticks_per_sec: f64) -> Result<Duration> {
    let own = proc_stat(pid)?;
    let children: u64 = proc_stats()?
        .filter(|p| p.parent == pid)
        .map(|p| p.ticks)
        .sum();
    Ok(ticks_to_duration(
        own.ticks + own.reaped_ticks + children,
        ticks_per_sec,
    ))
}

/// CPU time (user + system, all threads) a process has used so far.
pub fn proc_cpu(pid: u32, ticks_per_sec: f64) -> Result<Duration> {
    Ok(ticks_to_duration(proc_stat(pid)?.ticks, ticks_per_sec))
}

/// What `/proc/<pid>/stat` tells of a process.
pub struct ProcStat {
    pub parent: u32,
    /// Its process group.
    pub group: u32,
    /// User + system clock ticks of all its threads.
    pub ticks: u64,
    /// Those of the children it reaped.
    pub reaped_ticks: u64,
}

/// `pid`'s [`ProcStat`].
pub fn proc_stat(pid: u32) -> Result<ProcStat> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // Fields after the parenthesised command name start at field 3 (state):
    // ppid 4, pgrp 5, utime 14, stime 15, cutime 16, cstime 17.
    let after_comm = text
        .rfind(')')
        .map(|i| &text[i + 1..])
        .with_context(|| format!("no command name in {path}"))?;
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let field = |i: usize| -> Result<u64> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .with_context(|| format!("no field {} in {path}", i + 3))
    };
    Ok(ProcStat {
        parent: u32::try_from(field(1)?).context("a parent pid out of range")?,
        group: u32::try_from(field(2)?).context("a process group out of range")?,
        ticks: field(11)? + field(12)?,
        reaped_ticks: field(13)? + field(14)?,
    })
}

/// The [`ProcStat`] of every live process (one that ends meanwhile is
/// left out).
pub fn proc_stats() -> Result<impl Iterator<Item = ProcStat>> {
    let entries = std::fs::read_dir("/proc").context("listing /proc")?;
    Ok(entries.flatten().filter_map(|entry| {
        let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
        proc_stat(pid).ok()
    }))
}

/// `ticks` of the kernel's clock as a duration.
pub fn ticks_to_duration(ticks: u64, ticks_per_sec: f64) -> Duration {
    Duration::from_secs_f64(ticks as f64 / ticks_per_sec)
}

/// The kernel's clock tick rate for `/proc/*/stat` times (`getconf
/// CLK_TCK`); 100, the value on every common Linux build, if getconf fails.
pub fn clock_ticks_per_sec() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

/// `SELECT count(*) FROM events`, through a read-only connection.
pub fn count_events(database: &Path) -> Result<u64> {
    use rusqlite::{Connection, OpenFlags};
    let conn = Connection::open_with_flags(
        database,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("opening {} read-only", database.display()))?;
    let n: i64 = conn
        .query_row("SELECT count(*) FROM events", [], |row| row.get(0))
        .context("counting events")?;
    u64::try_from(n).context("a negative row count")
}

/// What the search index holds, through a read-only connection.
#[derive(Debug, Clone, Copy)]
pub struct SearchFigures {
    /// Events past the indexer's mark: how far indexing trails ingest.
    pub lag_rows: i64,
    /// Pages of the FTS5 index's own tables, in bytes.
    pub index_bytes: i64,
    /// The whole database file (page count × page size), in bytes.
    pub db_bytes: i64,
}

pub fn search_figures(database: &Path) -> Result<SearchFigures> {
    let conn = open_read_only(database)?;
    let one = |sql: &str| -> Result<i64> {
        conn.query_row(sql, [], |row| row.get(0))
            .with_context(|| format!("reading {sql}"))
    };
    // Since schema 20 the index is a file of its own beside the database;
    // before, tables and a mark inside it (a BASELINE binary's layout).
    let mut file = database.as_os_str().to_owned();
    file.push(".search");
    if Path::new(&file).exists() {
        conn.execute(
            "ATTACH DATABASE ?1 AS search",
            [file.to_str().context("a non-UTF-8 path")?],
        )
        .context("attaching the search index")?;
        return Ok(SearchFigures {
            lag_rows: one("SELECT coalesce((SELECT max(id) FROM events), 0)
                      - coalesce((SELECT value FROM search.state
                                  WHERE key = 'indexed_through'), 0)")?,
            index_bytes: one("SELECT page_count * page_size
                              FROM pragma_page_count('search'), pragma_page_size('search')")?,
            db_bytes: one(
                "SELECT page_count * page_size FROM pragma_page_count, pragma_page_size",
            )?,
        });
    }
    Ok(SearchFigures {
        lag_rows: one("SELECT coalesce((SELECT max(id) FROM events), 0)
                  - coalesce((SELECT CAST(value AS INTEGER) FROM meta
                              WHERE key = 'search_indexed_through'), 0)")?,
        index_bytes: one(
            "SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name LIKE 'events_fts%'",
        )?,
        db_bytes: one("SELECT page_count * page_size FROM pragma_page_count, pragma_page_size")?,
    })
}

/// An event's state over `events`: since schema version 21 its outcome
/// row's where it has one; a baseline binary's database has no such table.
fn event_state(conn: &rusqlite::Connection) -> Result<&'static str> {
    let outcomes: bool = conn
        .query_row(
            "SELECT count(*) > 0 FROM sqlite_schema WHERE name = 'event_outcomes'",
            [],
            |row| row.get(0),
        )
        .context("looking for event_outcomes")?;
    Ok(if outcomes {
        "coalesce((SELECT o.state FROM event_outcomes AS o WHERE o.event_id = events.id), events.state)"
    } else {
        "state"
    })
}

/// Rows per event state, through a read-only connection.
pub fn count_states(database: &Path) -> Result<Tally> {
    let conn = open_read_only(database)?;
    let mut stmt = conn
        .prepare(&format!(
            "SELECT {state}, count(*) FROM events GROUP BY 1 ORDER BY 1",
            state = event_state(&conn)?
        ))
        .context("preparing the state count")?;
    let rows = stmt
        .query_map([], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
        })
        .context("counting rows per state")?
        .map(|r| Ok(r.map(|(s, n)| (s, u64::try_from(n).unwrap_or(0)))?))
        .collect::<Result<Vec<_>>>()?;
    Ok(rows)
}

/// Pending rows right now, while the server runs (WAL: reading does not
/// block its writer).
pub fn count_pending(database: &Path) -> Result<u64> {
    let conn = open_read_only(database)?;
    let n: i64 = conn
        .query_row(
            &format!(
                "SELECT count(*) FROM events WHERE {} = 'pending'",
                event_state(&conn)?
            ),
            [],
            |row| row.get(0),
        )
        .context("counting pending rows")?;
    u64::try_from(n).context("a negative row count")
}

/// Labels with their counts, as the database grouped them.
pub type Tally = Vec<(String, u64)>;

/// Attempt rows per outcome (`delivered`, `retry`, `dead`) and the most
/// common errors of the failed ones, for the report.
pub fn attempt_summary(database: &Path) -> Result<(Tally, Tally)> {
    let conn = open_read_only(database)?;
    let count = |sql: &str| -> Result<Tally> {
        let mut stmt = conn.prepare(sql).context("preparing an attempts query")?;
        stmt.query_map([], |row| {
            Ok((
                row.get::<_, Option<String>>(0)?.unwrap_or_default(),
                row.get::<_, i64>(1)?,
            ))
        })
        .context("reading attempts")?
        .map(|r| Ok(r.map(|(s, n)| (s, u64::try_from(n).unwrap_or(0)))?))
        .collect()
    };
    let outcomes =
        count("SELECT outcome, count(*) FROM attempts GROUP BY outcome ORDER BY outcome")?;
    let errors = count(
        "SELECT coalesce(CAST(status_code AS TEXT) || ' ', '') || coalesce(error, ''), count(*) \
         FROM attempts WHERE outcome != 'delivered' GROUP BY 1 ORDER BY 2 DESC LIMIT 5",
    )?;
    Ok((outcomes, errors))
}

/// `(destination, label, count)` rows, as the database grouped them.
pub type LaneTally = Vec<(String, String, u64)>;

/// Delivery rows per destination and state, and attempt rows per
/// destination and outcome: databases since schema 9 (routes) only.
pub fn per_destination(database: &Path) -> Result<(LaneTally, LaneTally)> {
    let conn = open_read_only(database)?;
    let count = |sql: &str| -> Result<LaneTally> {
        let mut stmt = conn
            .prepare(sql)
            .with_context(|| format!("preparing {sql:?}"))?;
        stmt.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, i64>(2)?,
            ))
        })
        .with_context(|| format!("running {sql:?}"))?
        .map(|r| Ok(r.map(|(d, s, n)| (d, s, u64::try_from(n).unwrap_or(0)))?))
        .collect()
    };
    let deliveries =
        count("SELECT destination, state, count(*) FROM deliveries GROUP BY 1, 2 ORDER BY 1, 2")?;
    let attempts =
        count("SELECT destination, outcome, count(*) FROM attempts GROUP BY 1, 2 ORDER BY 1, 2")?;
    Ok((deliveries, attempts))
}

pub fn open_read_only(database: &Path) -> Result<rusqlite::Connection> {
    use rusqlite::{Connection, OpenFlags};
    let conn = Connection::open_with_flags(
        database,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("opening {} read-only", database.display()))?;
    conn.busy_timeout(Duration::from_secs(5))
        .context("setting the busy timeout")?;
    Ok(conn)
}

/// Lines of the server log at WARN or ERROR level, counted, with the first
/// few of them.
pub fn log_problems(log: &str, keep: usize) -> (u64, Vec<String>) {
    let mut count = 0;
    let mut first = Vec::new();
    for line in log.lines() {
        if line.contains(" WARN ") || line.contains(" ERROR ") {
            count += 1;
            if first.len() < keep {
                first.push(line.to_owned());
            }
        }
    }
    (count, first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_status_reads_this_process_rss() {
        let kib = proc_status_kib(std::process::id(), "VmRSS").unwrap();
        assert!(kib > 0);
    }

    #[test]
    fn proc_cpu_reads_this_process() {
        let spin = Instant::now();
        while spin.elapsed() < Duration::from_millis(30) {
            std::hint::black_box(0u64);
        }
        let cpu = proc_cpu(std::process::id(), clock_ticks_per_sec()).unwrap();
        assert!(cpu > Duration::ZERO);
    }

    #[test]
    fn config_names_both_listeners_and_the_database() {
        let toml = config_toml(
            "127.0.0.1:1000".parse().unwrap(),
            "127.0.0.1:1001".parse().unwrap(),
            Path::new("/tmp/x/hookbox.db"),
            "normal",
            true,
        );
        assert!(toml.contains("listen = \"127.0.0.1:1000\""));
        assert!(toml.contains("admin_listen = \"127.0.0.1:1001\""));
        assert!(toml.contains("database = \"/tmp/x/hookbox.db\""));
        assert!(toml.contains("durability = \"normal\""));
        assert!(toml.contains("secrets = [\"bench-secret\"]"));
    }

    #[test]
    fn deliver_table_follows_the_source() {
        let mut toml = config_toml(
            "127.0.0.1:1000".parse().unwrap(),
            "127.0.0.1:1001".parse().unwrap(),
            Path::new("/tmp/x/hookbox.db"),
            "full",
            true,
        );
        toml.push_str(&deliver_toml("http://127.0.0.1:9/hook", "whsec_AAAA"));
        assert!(toml.ends_with(
            "[sources.deliver]\nurl = \"http://127.0.0.1:9/hook\"\nsigning_secret = \"whsec_AAAA\"\n"
        ));
        assert!(toml.find("[[sources]]").unwrap() < toml.find("[sources.deliver]").unwrap());
    }

    #[test]
    fn routes_are_an_array_of_named_tables_after_the_source() {
        let mut toml = config_toml(
            "127.0.0.1:1000".parse().unwrap(),
            "127.0.0.1:1001".parse().unwrap(),
            Path::new("/tmp/x/hookbox.db"),
            "full",
            true,
        );
        let route = |name: &str, only| Route {
            name: name.to_owned(),
            url: format!("http://127.0.0.1:9/{name}"),
            signing_secret: format!("whsec_{name}"),
            only,
        };
        toml.push_str(&routes_toml(&[
            route("a", None),
            route("b", Some(Parity::Even)),
        ]));
        let config: toml::Table = toml.parse().unwrap();
        let source = &config["sources"].as_array().unwrap()[0];
        assert_eq!(source["name"].as_str(), Some("github"));
        let deliver = source["deliver"].as_array().unwrap();
        assert_eq!(deliver.len(), 2);
        let (a, b) = (
            deliver[0].as_table().unwrap(),
            deliver[1].as_table().unwrap(),
        );
        assert_eq!(a["name"].as_str(), Some("a"));
        assert_eq!(a["url"].as_str(), Some("http://127.0.0.1:9/a"));
        assert_eq!(a["signing_secret"].as_str(), Some("whsec_a"));
        assert!(!a.contains_key("events") && !a.contains_key("when"));
        assert_eq!(b["name"].as_str(), Some("b"));
        assert_eq!(b["url"].as_str(), Some("http://127.0.0.1:9/b"));
        assert_eq!(b["events"].as_array().unwrap().len(), 1);
        assert_eq!(b["events"][0].as_str(), Some("push"));
        let when = b["when"].as_table().unwrap();
        assert_eq!(when.len(), 1);
        assert_eq!(when[PARITY_POINTER].as_str(), Some("even"));
    }

    #[test]
    fn one_destination_stays_the_single_table() {
        let mut toml = config_toml(
            "127.0.0.1:1000".parse().unwrap(),
            "127.0.0.1:1001".parse().unwrap(),
            Path::new("/tmp/x/hookbox.db"),
            "full",
            true,
        );
        toml.push_str(&deliver_toml("http://127.0.0.1:9/hook", "whsec_AAAA"));
        let config: toml::Table = toml.parse().unwrap();
        let deliver = config["sources"][0]["deliver"].as_table().unwrap();
        assert_eq!(deliver.len(), 2);
        assert_eq!(deliver["url"].as_str(), Some("http://127.0.0.1:9/hook"));
    }

    #[test]
    fn a_pull_destination_is_a_named_table_and_long_polls_go_under_edge() {
        let mut toml = config_toml(
            "127.0.0.1:1000".parse().unwrap(),
            "127.0.0.1:1001".parse().unwrap(),
            Path::new("/tmp/x/hookbox.db"),
            "full",
            true,
        );
        toml.push_str(&pull_toml(&Pull {
            name: "pull".to_owned(),
            token: "bench-pull-token-0123456789".to_owned(),
            max_client_long_polls: Some(132),
        }));
        let config: toml::Table = toml.parse().unwrap();
        let deliver = config["sources"][0]["deliver"].as_array().unwrap();
        assert_eq!(deliver.len(), 1);
        assert_eq!(deliver[0]["name"].as_str(), Some("pull"));
        assert_eq!(
            deliver[0]["pull"]["token"].as_str(),
            Some("bench-pull-token-0123456789")
        );
        assert_eq!(
            config["edge"]["max_client_long_polls"].as_integer(),
            Some(132)
        );
        assert_eq!(config["server"]["durability"].as_str(), Some("full"));

        let plain = pull_toml(&Pull {
            name: "pull".to_owned(),
            token: "bench-pull-token-0123456789".to_owned(),
            max_client_long_polls: None,
        });
        assert!(!plain.contains("[edge]"));
    }

    #[test]
    fn a_protected_destination_has_its_settings_and_the_source_its_order_key() {
        let base = || {
            config_toml(
                "127.0.0.1:1000".parse().unwrap(),
                "127.0.0.1:1001".parse().unwrap(),
                Path::new("/tmp/x/hookbox.db"),
                "full",
                true,
            )
        };
        let protected = |rate: Option<&str>, failures, probe: Option<&str>| Protected {
            url: "http://127.0.0.1:9/hook".to_owned(),
            signing_secret: "whsec_AAAA".to_owned(),
            order_key: "/hookbox_bench/key".to_owned(),
            rate: rate.map(str::to_owned),
            breaker_failures: failures,
            breaker_probe: probe.map(str::to_owned),
        };
        let mut toml = base();
        toml.push_str(&protected_toml(&protected(Some("500/s"), None, Some("5s"))));
        let config: toml::Table = toml.parse().unwrap();
        let source = &config["sources"][0];
        assert_eq!(source["name"].as_str(), Some("github"));
        assert_eq!(source["order_key"][0].as_str(), Some("/hookbox_bench/key"));
        let deliver = source["deliver"].as_table().unwrap();
        assert_eq!(deliver["url"].as_str(), Some("http://127.0.0.1:9/hook"));
        assert_eq!(deliver["rate"].as_str(), Some("500/s"));
        assert_eq!(deliver["breaker_probe"].as_str(), Some("5s"));
        assert!(!deliver.contains_key("breaker_failures"));

        let mut toml = base();
        toml.push_str(&protected_toml(&protected(None, Some(0), None)));
        let config: toml::Table = toml.parse().unwrap();
        let deliver = config["sources"][0]["deliver"].as_table().unwrap();
        assert_eq!(deliver["breaker_failures"].as_integer(), Some(0));
        assert!(!deliver.contains_key("rate") && !deliver.contains_key("breaker_probe"));
    }

    #[test]
    fn per_destination_groups_deliveries_and_attempts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hookbox.db");
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE deliveries (destination TEXT, state TEXT);
             CREATE TABLE attempts (destination TEXT, outcome TEXT);
             INSERT INTO deliveries VALUES ('a', 'delivered'), ('a', 'delivered'),
                 ('b', 'delivered'), ('b', 'pending');
             INSERT INTO attempts VALUES ('a', 'delivered'), ('b', 'retry');",
        )
        .unwrap();
        drop(conn);
        let (deliveries, attempts) = per_destination(&path).unwrap();
        let row = |d: &str, s: &str, n| (d.to_owned(), s.to_owned(), n);
        assert_eq!(
            deliveries,
            vec![
                row("a", "delivered", 2),
                row("b", "delivered", 1),
                row("b", "pending", 1)
            ]
        );
        assert_eq!(
            attempts,
            vec![row("a", "delivered", 1), row("b", "retry", 1)]
        );
    }

    #[test]
    fn log_problems_counts_warnings_and_errors() {
        let log =
            "2026 INFO hookbox: delivered\n2026  WARN hookbox: cannot record\n2026 ERROR x: boom\n";
        let (n, first) = log_problems(log, 1);
        assert_eq!(n, 2);
        assert_eq!(first, vec!["2026  WARN hookbox: cannot record".to_owned()]);
    }
}
