//! The load itself: N keep-alive HTTP/1.1 connections, each a closed loop
//! sending `POST /hooks/github` as fast as answers come back, for a warm-up
//! and then a measured window.
//!
//! A request counts toward the measured figures when it was sent after the
//! warm-up and answered before the deadline. Every answer, warm-up included,
//! counts toward the totals, which the row check compares with the database.

use crate::payload::{Delivery, Parity, Signer};
use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

pub struct LoadConfig {
    pub addr: SocketAddr,
    pub connections: u32,
    pub warmup: Duration,
    pub duration: Duration,
    /// Share of requests that resend an id this connection already got a 202 for.
    pub duplicates: f64,
    /// A request unanswered after this long is an error and its connection is dropped.
    pub request_timeout: Duration,
    pub signer: Arc<Signer>,
    pub seed: u64,
    /// Start-to-start gap between one connection's requests; `None` sends
    /// back to back (a closed loop).
    pub pace: Option<Duration>,
    /// Where to note, per delivery id, when its 202 came back (`--deliver`
    /// runs); `None` keeps no per-id record.
    pub receipts: Option<Arc<Receipts>>,
}

/// When each accepted delivery id got its 202, by this process's clock.
#[derive(Default)]
pub struct Receipts {
    inner: Mutex<ReceiptMap>,
}

/// One accepted delivery id.
#[derive(Clone, Copy)]
pub struct Receipt {
    /// When its 202 came back.
    pub at: Instant,
    /// Which half it is in, for destinations that take one half.
    pub parity: Parity,
}

#[derive(Default)]
struct ReceiptMap {
    map: HashMap<String, Receipt>,
    /// Of `map`, the even ones: counted as they come, so a waiter can
    /// compare counts without walking the map.
    even: usize,
}

impl Receipts {
    pub fn record(&self, id: String, receipt: Receipt) {
        let mut inner = self.lock();
        let even = receipt.parity == Parity::Even;
        if inner.map.insert(id, receipt).is_none() && even {
            inner.even += 1;
        }
    }

    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// Accepted ids of one parity.
    pub fn len_of(&self, parity: Parity) -> usize {
        let inner = self.lock();
        match parity {
            Parity::Even => inner.even,
            Parity::Odd => inner.map.len() - inner.even,
        }
    }

    /// Runs `f` over every (delivery id, receipt) recorded.
    pub fn with_map<T>(&self, f: impl FnOnce(&HashMap<String, Receipt>) -> T) -> T {
        f(&self.lock().map)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ReceiptMap> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Answers by kind.
#[derive(Default, Clone, Copy)]
pub struct Counts {
    /// 202 accepted.
    pub accepted: u64,
    /// 200 duplicate.
    pub duplicate: u64,
    /// 503 unavailable (overload).
    pub unavailable: u64,
    /// Any other status.
    pub other: u64,
    /// Connection errors and timeouts: no answer at all.
    pub errors: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.accepted += o.accepted;
        self.duplicate += o.duplicate;
        self.unavailable += o.unavailable;
        self.other += o.other;
        self.errors += o.errors;
    }

    pub fn answered(&self) -> u64 {
        self.accepted + self.duplicate + self.unavailable + self.other
    }
}

/// Answers that break the contract.
#[derive(Default, Clone, Copy)]
pub struct Anomalies {
    /// A new id answered 200, or a repeated id answered 202.
    pub wrong_status: u64,
    /// A duplicate answered with another row id than its first 202 gave.
    pub wrong_id: u64,
    /// A 2xx whose body has no `"id":N`.
    pub no_id: u64,
}

impl Anomalies {
    fn add(&mut self, o: &Anomalies) {
        self.wrong_status += o.wrong_status;
        self.wrong_id += o.wrong_id;
        self.no_id += o.no_id;
    }

    pub fn any(&self) -> bool {
        self.wrong_status + self.wrong_id + self.no_id > 0
    }
}

pub struct Outcome {
    pub measured: Counts,
    pub total: Counts,
    pub anomalies: Anomalies,
    /// Measured latencies in microseconds, sorted.
    pub latencies_us: Vec<u32>,
    /// Times a keep-alive connection was found closed and reopened.
    pub reconnects: u64,
    /// A few examples of what went wrong, for the report.
    pub samples: Vec<String>,
    /// The measured window: after the warm-up, until the deadline.
    pub window: (Instant, Instant),
}

impl Outcome {
    /// The `q` quantile (0..=1) in milliseconds; 0 with no samples.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        let v = &self.latencies_us;
        if v.is_empty() {
            return 0.0;
        }
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        f64::from(v[rank - 1]) / 1000.0
    }
}

const MAX_SAMPLES: usize = 5;

/// Runs every connection to the deadline and merges what they saw.
pub async fn run(cfg: Arc<LoadConfig>) -> Result<Outcome> {
    let start = Instant::now();
    let window = (start + cfg.warmup, start + cfg.warmup + cfg.duration);
    let mut tasks = Vec::with_capacity(cfg.connections as usize);
    for conn in 0..cfg.connections {
        tasks.push(tokio::spawn(connection(Arc::clone(&cfg), conn, start)));
    }
    let mut out = Outcome {
        measured: Counts::default(),
        total: Counts::default(),
        anomalies: Anomalies::default(),
        latencies_us: Vec::new(),
        reconnects: 0,
        samples: Vec::new(),
        window,
    };
    for task in tasks {
        let c = task.await.context("a connection task panicked")?;
        out.measured.add(&c.measured);
        out.total.add(&c.total);
        out.anomalies.add(&c.anomalies);
        out.latencies_us.extend_from_slice(&c.latencies_us);
        out.reconnects += c.reconnects;
        for s in c.samples {
            if out.samples.len() < MAX_SAMPLES {
                out.samples.push(s);
            }
        }
    }
    out.latencies_us.sort_unstable();
    Ok(out)
}

/// What one request came back with.
enum Answer {
    Status(StatusCode, Bytes),
    /// No answer: the connection failed or the request timed out.
    Failed(String),
}

async fn connection(cfg: Arc<LoadConfig>, conn: u32, start: Instant) -> Outcome {
    let warmup_end = start + cfg.warmup;
    let deadline = warmup_end + cfg.duration;
    let host = HeaderValue::from_str(&cfg.addr.to_string())
        .expect("a socket address is a valid header value");
    let mut rng = SplitMix64(cfg.seed ^ (u64::from(conn) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut out = Outcome {
        measured: Counts::default(),
        total: Counts::default(),
        anomalies: Anomalies::default(),
        latencies_us: Vec::with_capacity(64 * 1024),
        reconnects: 0,
        samples: Vec::new(),
        window: (warmup_end, deadline),
    };
    let mut sender: Option<SendRequest<Full<Bytes>>> = None;
    // Ids that got a 202, with the row id it gave: the pool duplicates draw from.
    let mut acked: Vec<(u64, Option<u64>)> = Vec::new();
    let mut next_seq = 0u64;
    let mut next_send = start;

    while Instant::now() < deadline {
        if let Some(pace) = cfg.pace {
            // Paced: never more than one request per `pace`, and no burst to
            // catch up after a slow answer.
            tokio::time::sleep_until(next_send.into()).await;
            next_send = (next_send + pace).max(Instant::now());
            if Instant::now() >= deadline {
                break;
            }
        }
        let mut s = match sender.take() {
            Some(s) if !s.is_closed() => s,
            previous => {
                if previous.is_some() {
                    out.reconnects += 1;
                }
                match connect(cfg.addr).await {
                    Ok(s) => s,
                    Err(e) => {
                        let c = Counts {
                            errors: 1,
                            ..Counts::default()
                        };
                        record_sample(&mut out.samples, format!("connect: {e:#}"));
                        if Instant::now() >= warmup_end {
                            out.measured.add(&c);
                        }
                        out.total.add(&c);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                }
            }
        };

        let repeat = if !acked.is_empty() && rng.next_f64() < cfg.duplicates {
            Some(acked[rng.below(acked.len())])
        } else {
            None
        };
        let seq = match repeat {
            Some((seq, _)) => seq,
            None => {
                next_seq += 1;
                next_seq
            }
        };
        let delivery = cfg.signer.delivery(conn, seq);
        let receipt_id = cfg
            .receipts
            .is_some()
            .then(|| (delivery.id.clone(), delivery.parity));
        let req = request(delivery, &host);

        let sent = Instant::now();
        let answer = match tokio::time::timeout(cfg.request_timeout, send(&mut s, req)).await {
            Ok(Ok((status, body))) => Answer::Status(status, body),
            Ok(Err(e)) => Answer::Failed(format!("{e:#}")),
            Err(_) => Answer::Failed(format!("no answer within {:?}", cfg.request_timeout)),
        };
        let done = Instant::now();
        let measured = sent >= warmup_end && done <= deadline;

        let mut c = Counts::default();
        match answer {
            Answer::Failed(e) => {
                c.errors = 1;
                record_sample(&mut out.samples, format!("request: {e}"));
            }
            Answer::Status(status, body) => {
                sender = Some(s);
                match status {
                    StatusCode::ACCEPTED => {
                        c.accepted = 1;
                        let id = row_id(&body);
                        if id.is_none() {
                            out.anomalies.no_id += 1;
                        }
                        if repeat.is_some() {
                            out.anomalies.wrong_status += 1;
                            record_sample(
                                &mut out.samples,
                                format!("repeated delivery answered 202: {}", snippet(&body)),
                            );
                        } else {
                            acked.push((seq, id));
                            if let (Some(receipts), Some((delivery_id, parity))) =
                                (&cfg.receipts, receipt_id)
                            {
                                receipts.record(delivery_id, Receipt { at: done, parity });
                            }
                        }
                    }
                    StatusCode::OK => {
                        c.duplicate = 1;
                        let id = row_id(&body);
                        if id.is_none() {
                            out.anomalies.no_id += 1;
                        }
                        match repeat {
                            None => {
                                out.anomalies.wrong_status += 1;
                                record_sample(
                                    &mut out.samples,
                                    format!("new delivery answered 200: {}", snippet(&body)),
                                );
                            }
                            Some((_, first)) => {
                                if first.is_some() && id.is_some() && first != id {
                                    out.anomalies.wrong_id += 1;
                                    record_sample(
                                        &mut out.samples,
                                        format!(
                                            "duplicate answered id {id:?}, first answer was {first:?}"
                                        ),
                                    );
                                }
                            }
                        }
                    }
                    StatusCode::SERVICE_UNAVAILABLE => c.unavailable = 1,
                    other => {
                        c.other = 1;
                        record_sample(
                            &mut out.samples,
                            format!("status {other}: {}", snippet(&body)),
                        );
                    }
                }
                if measured {
                    let us = done.duration_since(sent).as_micros();
                    out.latencies_us.push(u32::try_from(us).unwrap_or(u32::MAX));
                }
            }
        }
        if measured {
            out.measured.add(&c);
        }
        out.total.add(&c);
    }
    out
}

pub async fn connect(addr: SocketAddr) -> Result<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_nodelay(true).context("setting TCP_NODELAY")?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .context("HTTP/1.1 handshake")?;
    tokio::spawn(async move {
        // An error here surfaces as a failed send on the sender side.
        let _ = conn.await;
    });
    Ok(sender)
}

pub fn request(d: Delivery, host: &HeaderValue) -> Request<Full<Bytes>> {
    let mut req = Request::new(Full::new(d.body));
    *req.method_mut() = hyper::Method::POST;
    *req.uri_mut() = hyper::Uri::from_static("/hooks/github");
    let h = req.headers_mut();
    h.insert(HOST, host.clone());
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert("x-github-event", HeaderValue::from_static("push"));
    h.insert("x-github-hook-id", HeaderValue::from_static("123456"));
    h.insert(
        "user-agent",
        HeaderValue::from_static("GitHub-Hookshot/bench"),
    );
    // Hex, dashes and `sha256=` are always valid header bytes.
    h.insert(
        "x-github-delivery",
        HeaderValue::from_str(&d.id).expect("a uuid-shaped id is a valid header value"),
    );
    h.insert(
        "x-hub-signature-256",
        HeaderValue::from_str(&d.signature).expect("sha256=<hex> is a valid header value"),
    );
    req
}

pub async fn send(
    s: &mut SendRequest<Full<Bytes>>,
    req: Request<Full<Bytes>>,
) -> Result<(StatusCode, Bytes)> {
    s.ready().await.context("waiting for the connection")?;
    let resp = s.send_request(req).await.context("sending the request")?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .context("reading the answer")?
        .to_bytes();
    Ok((status, body))
}

/// The `N` of `"id":N` in an answer body.
fn row_id(body: &[u8]) -> Option<u64> {
    let at = body.windows(5).position(|w| w == b"\"id\":")? + 5;
    let rest = &body[at..];
    let rest = &rest[rest.iter().position(|b| !b.is_ascii_whitespace())?..];
    let end = rest
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(rest.len());
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

fn snippet(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned()
}

fn record_sample(samples: &mut Vec<String>, s: String) {
    if samples.len() < MAX_SAMPLES {
        samples.push(s);
    }
}

/// Small, fast, good-enough generator for choosing duplicates.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n), n > 0.
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_id_reads_the_id_of_both_answers() {
        assert_eq!(row_id(br#"{"status":"accepted","id":42}"#), Some(42));
        assert_eq!(row_id(br#"{"status":"duplicate", "id": 7 }"#), Some(7));
        assert_eq!(row_id(br#"{"error":"unavailable"}"#), None);
    }

    #[test]
    fn quantiles_use_the_nearest_rank() {
        let out = Outcome {
            measured: Counts::default(),
            total: Counts::default(),
            anomalies: Anomalies::default(),
            latencies_us: (1..=1000).collect(),
            reconnects: 0,
            samples: Vec::new(),
            window: (Instant::now(), Instant::now()),
        };
        assert_eq!(out.quantile_ms(0.5), 0.5);
        assert_eq!(out.quantile_ms(0.99), 0.99);
        assert_eq!(out.quantile_ms(0.999), 0.999);
        assert_eq!(out.quantile_ms(1.0), 1.0);
    }

    #[test]
    fn receipts_count_each_parity() {
        let r = Receipts::default();
        let at = Instant::now();
        for (id, parity) in [
            ("a", Parity::Even),
            ("b", Parity::Odd),
            ("c", Parity::Even),
            ("a", Parity::Even),
        ] {
            r.record(id.to_owned(), Receipt { at, parity });
        }
        assert_eq!(r.len(), 3);
        assert_eq!(r.len_of(Parity::Even), 2);
        assert_eq!(r.len_of(Parity::Odd), 1);
    }

    #[test]
    fn split_mix_stays_in_range() {
        let mut r = SplitMix64(1);
        for _ in 0..10_000 {
            let f = r.next_f64();
            assert!((0.0..1.0).contains(&f));
            assert!(r.below(3) < 3);
        }
    }
}
