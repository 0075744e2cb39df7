//! `hookbox-attack`: valid requests' latency while an attack runs.
//!
//! Starts the release `hookbox serve` on a fresh database, then runs phases
//! of `--phase` seconds each: a baseline, slowloris (`--slowloris`
//! connections sending a header byte every 100 ms), `--idle` connections
//! that open and send nothing, idle uploads (eleven connections from
//! 127.0.0.2 whose `Content-Length`s add up to the 256 MiB body budget, 10
//! x 25 MiB + 6 MiB, sending no body and starting over whenever answered),
//! a duplicate storm (64 tasks resending one id), and a flood of forged
//! deliveries (`--forged-connections` connections, each from its own
//! loopback address 127.0.1.x, posting badly signed deliveries as fast as
//! they are answered: 401 until the address is blocked, then 429; every one
//! is a refusal hookbox records in its rejections table). `--phases` picks
//! some. During every phase `--valid` keep-alive connections post signed,
//! unique GitHub deliveries; the phase prints their count, errors (of
//! which 503s), p50 and p99 of the 202s, and the server's peak resident
//! memory during the phase (VmRSS sampled every 50 ms). `--runs` repeats
//! the whole sequence on a fresh server each time and ends with the median
//! of each figure per phase. Raise the fd limit first for many idle
//! connections (`ulimit -n 65536`, as `bench/run.sh` does with `ATTACK=1`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::Parser;
use hmac::{KeyInit, Mac};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const SECRET: &str = "attack-secret";

#[derive(Parser, Debug)]
#[command(
    name = "hookbox-attack",
    about = "Valid p50/p99 while hookbox is attacked"
)]
struct Args {
    /// The hookbox binary [default: <workspace>/target/release/hookbox].
    #[arg(long)]
    hookbox: Option<PathBuf>,
    /// Seconds per phase.
    #[arg(long, default_value_t = 5.0)]
    phase: f64,
    /// Keep-alive connections posting valid deliveries.
    #[arg(long, default_value_t = 8)]
    valid: u32,
    /// Slowloris connections.
    #[arg(long, default_value_t = 500)]
    slowloris: u32,
    /// Idle connections (capped by the server's max_connections queue).
    #[arg(long, default_value_t = 10_000)]
    idle: u32,
    /// Connections flooding forged deliveries in the forged phase.
    #[arg(long, default_value_t = 32)]
    forged_connections: u32,
    /// Times to run every phase, each on a fresh server.
    #[arg(long, default_value_t = 1)]
    runs: u32,
    /// The phases to run, in this order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "baseline,slowloris,idle,uploads,storm,forged"
    )]
    phases: Vec<Phase>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Phase {
    Baseline,
    Slowloris,
    Idle,
    Uploads,
    Storm,
    Forged,
}

/// The idle uploads' `Content-Length`s: 10 x 25 MiB + 6 MiB, hookbox's
/// whole body budget.
const UPLOADS: [u64; 11] = [
    25 << 20,
    25 << 20,
    25 << 20,
    25 << 20,
    25 << 20,
    25 << 20,
    25 << 20,
    25 << 20,
    25 << 20,
    25 << 20,
    6 << 20,
];

/// What one phase measured.
#[derive(Debug, Clone)]
struct Measured {
    name: String,
    rate: f64,
    errors: u64,
    /// Of the errors, the answers 503.
    unavailable: u64,
    p50_ms: f64,
    p99_ms: f64,
    peak_rss_mib: f64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    tokio::runtime::Runtime::new()?.block_on(run(args))
}

struct Server {
    child: Child,
    addr: SocketAddr,
    admin: SocketAddr,
    dir: tempfile::TempDir,
}

/// The process's resident memory now, in MiB (Linux).
fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

async fn start(args: &Args) -> Result<Server> {
    let bin = args.hookbox.clone().unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/release/hookbox")
    });
    let dir = tempfile::tempdir()?;
    let (addr, admin) = (free_port()?, free_port()?);
    let config = dir.path().join("hookbox.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"{addr}\"\nadmin_listen = \"{admin}\"\ndatabase = {:?}\n\
             header_timeout = \"10s\"\n\n[[sources]]\nname = \"github\"\nkind = \"github\"\n\
             secrets = [\"{SECRET}\"]\n",
            dir.path().join("hookbox.db").display().to_string()
        ),
    )?;
    let child = Command::new(&bin)
        .args(["serve", "--config"])
        .arg(&config)
        .env_remove("HOOKBOX_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let server = Server {
        child,
        addr,
        admin,
        dir,
    };
    for _ in 0..200 {
        if let Ok(mut s) = TcpStream::connect(addr).await {
            let _ = s
                .write_all(b"GET /readyz HTTP/1.1\r\nhost: x\r\n\r\n")
                .await;
            return Ok(server);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    bail!("hookbox did not start")
}

fn signature(body: &[u8]) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes())
        .expect("HMAC takes keys of any length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

fn delivery(id: &str) -> Request<Full<Bytes>> {
    let body = Bytes::from(format!(r#"{{"id":"{id}","zen":"attack"}}"#));
    Request::post("/hooks/github")
        .header("host", "bench")
        .header("content-type", "application/json")
        .header("x-github-event", "push")
        .header("x-github-delivery", id)
        .header("x-hub-signature-256", signature(&body))
        .body(Full::new(body))
        .expect("static parts make a valid request")
}

/// What one valid client saw: the latency of each 202 in microseconds,
/// the other answers (and failures), and of those the 503s.
struct Seen {
    lat: Vec<u64>,
    errors: u64,
    unavailable: u64,
}

/// Posts until `stop`.
async fn client(addr: SocketAddr, tag: String, stop: Arc<AtomicBool>) -> Seen {
    let (mut lat, mut errors, mut unavailable, mut seq) = (Vec::new(), 0, 0, 0u64);
    'outer: while !stop.load(Ordering::Relaxed) {
        let Ok(stream) = TcpStream::connect(addr).await else {
            errors += 1;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let Ok((mut tx, conn)) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
        else {
            errors += 1;
            continue;
        };
        tokio::spawn(conn);
        while !stop.load(Ordering::Relaxed) {
            seq += 1;
            let started = Instant::now();
            let answer = match tx.send_request(delivery(&format!("{tag}-{seq}"))).await {
                Ok(r) => (r.status().as_u16(), r.into_body().collect().await.is_ok()),
                Err(_) => (0, false),
            };
            match answer {
                (202, true) => lat.push(started.elapsed().as_micros() as u64),
                (status, _) => {
                    errors += 1;
                    unavailable += u64::from(status == 503);
                    continue 'outer;
                }
            }
        }
    }
    Seen {
        lat,
        errors,
        unavailable,
    }
}

/// One idle upload from 127.0.0.2, over and over until `stop`: the head of
/// a signed-looking GitHub delivery declaring `length` bytes, then nothing
/// until the server answers or closes. Returns the answers it got.
async fn idle_upload(addr: SocketAddr, length: u64, stop: Arc<AtomicBool>) -> u64 {
    let mut answered = 0;
    while !stop.load(Ordering::Relaxed) {
        let stream = async {
            let socket = TcpSocket::new_v4()?;
            socket.bind(SocketAddr::from(([127, 0, 0, 2], 0)))?;
            socket.connect(addr).await
        };
        let Ok(mut stream) = stream.await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let head = format!(
            "POST /hooks/github HTTP/1.1\r\nhost: bench\r\nx-github-event: push\r\n\
             x-github-delivery: upload\r\nx-hub-signature-256: sha256={}\r\n\
             content-length: {length}\r\n\r\n",
            "0".repeat(64)
        );
        if stream.write_all(head.as_bytes()).await.is_err() {
            continue;
        }
        let mut buf = [0u8; 512];
        loop {
            tokio::select! {
                read = stream.read(&mut buf) => {
                    if !matches!(read, Ok(n) if n > 0) {
                        break;
                    }
                    answered += 1;
                }
                () = tokio::time::sleep(Duration::from_millis(100)) => {
                    if stop.load(Ordering::Relaxed) {
                        return answered;
                    }
                }
            }
        }
    }
    answered
}

async fn phase(
    args: &Args,
    server: &Server,
    name: &str,
    attack: impl FnOnce(Arc<AtomicBool>),
) -> Measured {
    let addr = server.addr;
    let stop = Arc::new(AtomicBool::new(false));
    let pid = server.child.id();
    let sampler = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut peak = 0.0f64;
            while !stop.load(Ordering::Relaxed) {
                peak = peak.max(rss_mib(pid).unwrap_or(0.0));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            peak
        })
    };
    attack(stop.clone());
    // Let the attack build up before measuring.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let clients: Vec<_> = (0..args.valid)
        .map(|c| tokio::spawn(client(addr, format!("{name}-{c}"), stop.clone())))
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(args.phase)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut lat, mut errors, mut unavailable) = (Vec::new(), 0, 0);
    for c in clients {
        if let Ok(seen) = c.await {
            lat.extend(seen.lat);
            errors += seen.errors;
            unavailable += seen.unavailable;
        }
    }
    lat.sort_unstable();
    let q = |p: f64| {
        lat.get(((lat.len() as f64 * p).ceil() as usize).saturating_sub(1))
            .map_or(f64::NAN, |us| *us as f64 / 1000.0)
    };
    let measured = Measured {
        name: name.to_owned(),
        rate: lat.len() as f64 / args.phase,
        errors,
        unavailable,
        p50_ms: q(0.50),
        p99_ms: q(0.99),
        peak_rss_mib: sampler.await.unwrap_or(f64::NAN),
    };
    print(&measured);
    // Attackers see `stop` and wind down; give their sockets time to close.
    tokio::time::sleep(Duration::from_millis(500)).await;
    measured
}

fn print(m: &Measured) {
    println!(
        "{:<24} valid {:>6.0}/s  errors {:>6} (503: {:>6})  p50 {:>7.2} ms  p99 {:>7.2} ms  peak RSS {:>6.1} MiB",
        m.name, m.rate, m.errors, m.unavailable, m.p50_ms, m.p99_ms, m.peak_rss_mib
    );
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

async fn run(args: Args) -> Result<()> {
    let mut runs: Vec<Vec<Measured>> = Vec::new();
    for i in 1..=args.runs {
        if args.runs > 1 {
            println!("-- run {i} of {}", args.runs);
        }
        runs.push(run_once(&args).await?);
    }
    if args.runs > 1 {
        println!("-- median of {} runs", args.runs);
        for (p, first) in runs[0].iter().enumerate() {
            let of = |f: fn(&Measured) -> f64| median(runs.iter().map(|r| f(&r[p])).collect());
            print(&Measured {
                name: first.name.clone(),
                rate: of(|m| m.rate),
                errors: runs.iter().map(|r| r[p].errors).sum(),
                unavailable: runs.iter().map(|r| r[p].unavailable).sum(),
                p50_ms: of(|m| m.p50_ms),
                p99_ms: of(|m| m.p99_ms),
                peak_rss_mib: of(|m| m.peak_rss_mib),
            });
        }
        println!("(errors: the sum over all runs)");
    }
    Ok(())
}

async fn run_once(args: &Args) -> Result<Vec<Measured>> {
    let server = start(args).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut measured = Vec::new();
    for phase in &args.phases {
        measured.push(match phase {
            Phase::Baseline => self::phase(args, &server, "baseline", |_| {}).await,
            Phase::Slowloris => slowloris(args, &server).await,
            Phase::Idle => idle(args, &server).await,
            Phase::Uploads => uploads(args, &server).await,
            Phase::Storm => storm(args, &server).await,
            Phase::Forged => forged(args, &server).await?,
        });
    }
    drop(server);
    Ok(measured)
}

async fn slowloris(args: &Args, server: &Server) -> Measured {
    let (addr, n) = (server.addr, args.slowloris);
    phase(args, server, &format!("slowloris x{n}"), |stop| {
        for i in 0..n {
            let stop = stop.clone();
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut s) = TcpStream::connect(addr).await else {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    };
                    let head = format!("POST /hooks/github HTTP/1.1\r\nx-slow-{i}: ");
                    for b in head.bytes().chain(std::iter::repeat(b'a')) {
                        if stop.load(Ordering::Relaxed) || s.write_all(&[b]).await.is_err() {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            });
        }
    })
    .await
}

async fn idle(args: &Args, server: &Server) -> Measured {
    let (addr, n) = (server.addr, args.idle);
    let opened = Arc::new(AtomicU64::new(0));
    let counted = opened.clone();
    let measured = phase(args, server, &format!("idle x{n}"), |stop| {
        for _ in 0..n {
            let (stop, opened) = (stop.clone(), opened.clone());
            tokio::spawn(async move {
                if let Ok(s) = TcpStream::connect(addr).await {
                    opened.fetch_add(1, Ordering::Relaxed);
                    while !stop.load(Ordering::Relaxed) {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    drop(s);
                }
            });
        }
    })
    .await;
    println!(
        "  (idle connections opened: {})",
        counted.load(Ordering::Relaxed)
    );
    measured
}

async fn uploads(args: &Args, server: &Server) -> Measured {
    let addr = server.addr;
    let answered = Arc::new(AtomicU64::new(0));
    let counted = answered.clone();
    let measured = phase(args, server, "idle uploads 256 MiB", |stop| {
        for length in UPLOADS {
            let (stop, answered) = (stop.clone(), answered.clone());
            tokio::spawn(async move {
                let n = idle_upload(addr, length, stop).await;
                answered.fetch_add(n, Ordering::Relaxed);
            });
        }
    })
    .await;
    println!(
        "  (idle uploads answered: {})",
        counted.load(Ordering::Relaxed)
    );
    measured
}

async fn storm(args: &Args, server: &Server) -> Measured {
    let addr = server.addr;
    let sent = Arc::new(AtomicU64::new(0));
    let storm = sent.clone();
    let measured = phase(args, server, "duplicate storm x64", |stop| {
        for _ in 0..64 {
            let (stop, sent) = (stop.clone(), sent.clone());
            tokio::spawn(async move {
                let Ok(stream) = TcpStream::connect(addr).await else {
                    return;
                };
                let Ok((mut tx, conn)) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
                else {
                    return;
                };
                tokio::spawn(conn);
                while !stop.load(Ordering::Relaxed) {
                    let Ok(r) = tx.send_request(delivery("storm-one-id")).await else {
                        return;
                    };
                    if r.into_body().collect().await.is_err() {
                        return;
                    }
                    sent.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    })
    .await;
    println!(
        "  (storm requests answered: {})",
        storm.load(Ordering::Relaxed)
    );
    measured
}

/// A GitHub delivery signed with the wrong secret.
fn forged_delivery(n: u64) -> Request<Full<Bytes>> {
    let body = Bytes::from(format!(r#"{{"id":"forged-{n}","zen":"forged"}}"#));
    Request::post("/hooks/github")
        .header("host", "bench")
        .header("content-type", "application/json")
        .header("x-github-event", "push")
        .header("x-github-delivery", format!("forged-{n}"))
        .header("x-hub-signature-256", format!("sha256={}", "ab".repeat(32)))
        .body(Full::new(body))
        .expect("static parts make a valid request")
}

/// Posts forged deliveries from `from` until `stop`, over and over on a
/// fresh connection whenever the server closes one (it closes after a
/// 429). Counts the 401s and the 429s.
async fn forger(
    addr: SocketAddr,
    from: std::net::Ipv4Addr,
    stop: Arc<AtomicBool>,
    counts: Arc<[AtomicU64; 3]>,
) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let stream = async {
            let socket = TcpSocket::new_v4()?;
            socket.bind(SocketAddr::from((from, 0)))?;
            socket.connect(addr).await
        };
        let Ok(stream) = stream.await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let Ok((mut tx, conn)) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
        else {
            continue;
        };
        tokio::spawn(conn);
        while !stop.load(Ordering::Relaxed) {
            n += 1;
            let Ok(r) = tx.send_request(forged_delivery(n)).await else {
                break;
            };
            let slot = match r.status().as_u16() {
                401 => 0,
                429 => 1,
                _ => 2,
            };
            counts[slot].fetch_add(1, Ordering::Relaxed);
            if r.into_body().collect().await.is_err() || !tx.is_ready() {
                break;
            }
        }
    }
}

/// The admin token hookbox generated next to its database, and one
/// authorized GET on the admin listener.
async fn admin_get(server: &Server, path: &str) -> Result<String> {
    let token = std::fs::read_to_string(server.dir.path().join("admin-token"))
        .context("reading the generated admin token")?;
    let stream = TcpStream::connect(server.admin).await?;
    let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let request = Request::get(path)
        .header("host", "bench")
        .header("authorization", format!("Bearer {}", token.trim()))
        .body(Full::new(Bytes::new()))?;
    let body = tx
        .send_request(request)
        .await?
        .into_body()
        .collect()
        .await?;
    Ok(String::from_utf8_lossy(&body.to_bytes()).into_owned())
}

async fn forged(args: &Args, server: &Server) -> Result<Measured> {
    let (addr, n) = (server.addr, args.forged_connections);
    let counts: Arc<[AtomicU64; 3]> = Arc::new(Default::default());
    let counted = counts.clone();
    let measured = phase(args, server, &format!("forged flood x{n}"), |stop| {
        for i in 0..n {
            let from = std::net::Ipv4Addr::new(127, 0, 1, (i % 250) as u8 + 1);
            tokio::spawn(forger(addr, from, stop.clone(), counts.clone()));
        }
    })
    .await;
    let [unauthorized, limited, other] = &*counted;
    let (unauthorized, limited, other) = (
        unauthorized.load(Ordering::Relaxed),
        limited.load(Ordering::Relaxed),
        other.load(Ordering::Relaxed),
    );
    // The writer flushes refusals once a second: let it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let db = rusqlite::Connection::open_with_flags(
        server.dir.path().join("hookbox.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )?;
    // Since schema 15 a row also counts the repeats folded into it; an
    // older binary's table has no such column, and a row each.
    let folds = db
        .prepare("SELECT 1 FROM pragma_table_info('rejections') WHERE name = 'repeats'")?
        .exists([])?;
    let counted = if folds { "1 + repeats" } else { "1" };
    let (rows, refusals, max_id): (i64, i64, i64) = db.query_row(
        &format!(
            "SELECT count(*), coalesce(sum({counted}), 0), coalesce(max(id), 0) FROM rejections"
        ),
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    let metrics = admin_get(server, "/metrics").await?;
    let dropped = metrics
        .lines()
        .find_map(|l| l.strip_prefix("hookbox_rejections_dropped_total "))
        .unwrap_or("?")
        .to_owned();
    println!(
        "  (forged requests answered: {} = 401: {unauthorized} + 429: {limited} + other: {other}; \
         rejections table: {rows} rows counting {refusals} refusals, {max_id} rows written in all; \
         dropped (buffer full): {dropped})",
        unauthorized + limited + other
    );
    Ok(measured)
}
