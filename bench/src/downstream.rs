//! The destinations hookbox delivers to in `--deliver` runs: an HTTP/1.1
//! server on 127.0.0.1 that answers every request `204 No Content` at once
//! (or, for the outage scenario, whatever status it is switched to: `503`
//! while the destination is "down", see [`Downstream::set_status`]).
//!
//! It serves one path per destination (a *lane*: `/hook` for the single
//! destination, `/a` and `/b` with `--routes`), each with its own signing
//! key and its own record of what arrived. A request to any other path is
//! counted as stray. It runs on its own thread with its own current-thread
//! runtime, so the load generator's connections never delay it (or its
//! clock readings). For each request it records when the request head
//! arrived (an [`Instant`] of this process, comparable with the times the
//! load generator takes) and which delivery it carries
//! (`x-github-delivery`, else `x-hookbox-delivery-id`). It also checks the
//! Standard Webhooks signature hookbox puts on every request with the
//! lane's key and counts the ones that do not verify; the answer is 204
//! either way, so a bad signature never causes a retry. A lane fed by
//! `hookbox listen` (pull runs) carries no such signature: its check is
//! instead that each body is byte for byte the one the load generator
//! sent ([`Check::Body`]), and a failure counts the same way.

use anyhow::{Context, Result};
use base64::Engine as _;
use bytes::Bytes;
use hmac::{Hmac, KeyInit, Mac};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::header::HeaderMap;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use sha2::Sha256;
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;
use tokio::sync::oneshot;

use crate::payload::Signer;

/// How a lane tells a genuine request from a broken one.
pub enum Check {
    /// Standard Webhooks, with the decoded `whsec_` key the destination
    /// signs with (url destinations).
    Signed(Vec<u8>),
    /// As `Signed`, and the body must be exactly this: a transform's
    /// output, the same for every push the load generator sends.
    SignedAs(Vec<u8>, Bytes),
    /// The body must be the delivery the signer built for the request's
    /// `x-github-delivery` (`hookbox listen` forwards the provider's body
    /// and headers, not a signature of its own).
    Body(Arc<Signer>),
}

impl Check {
    fn passes(&self, headers: &HeaderMap, body: &[u8]) -> bool {
        match self {
            Check::Signed(key) => verify(key, headers, body),
            Check::SignedAs(key, expected) => body == &expected[..] && verify(key, headers, body),
            Check::Body(signer) => {
                header(headers, "x-github-delivery").is_some_and(|id| signer.built(id, body))
            }
        }
    }
}

/// One request as the downstream saw it.
pub struct Arrival {
    /// When the request head was parsed.
    pub at: Instant,
    pub delivery_id: String,
    /// The status it was answered with.
    pub status: u16,
}

/// Everything the downstream saw, shared with the load generator.
#[derive(Default)]
pub struct Seen {
    /// Every request that carried a delivery id, in arrival order.
    pub arrivals: Vec<Arrival>,
    /// First arrival per delivery id that was answered 2xx: what counts as
    /// delivered. (Every arrival, unless the status was switched.)
    pub first: HashMap<String, Instant>,
    /// Requests answered with a status other than 2xx.
    pub refused: u64,
    /// Requests without either delivery id header.
    pub no_id: u64,
    /// Requests whose `webhook-signature` did not verify (or was missing);
    /// for a [`Check::Body`] lane, bodies that were not the ones sent, for
    /// a [`Check::SignedAs`] lane also bodies other than the one expected.
    pub bad_signature: u64,
    /// Requests whose body could not be read to the end.
    pub body_errors: u64,
}

/// What every lane saw, behind one lock.
struct Record {
    /// Per lane, in the order [`Downstream::start`] was given them.
    lanes: Vec<Seen>,
    /// Requests to a path no lane serves.
    stray: u64,
}

pub struct Downstream {
    pub addr: SocketAddr,
    record: Arc<Mutex<Record>>,
    /// The status every request is answered with, shared with the handler.
    answer: Arc<AtomicU16>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Downstream {
    /// Binds 127.0.0.1:0 and starts serving on a new thread. `lanes` are
    /// `(path, check)`: the path a destination posts to and how its
    /// requests are verified.
    pub fn start(lanes: Vec<(String, Check)>) -> Result<Downstream> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .context("binding the downstream listener")?;
        listener
            .set_nonblocking(true)
            .context("making the downstream listener non-blocking")?;
        let addr = listener
            .local_addr()
            .context("reading the downstream address")?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("building the downstream runtime")?;
        let record = Arc::new(Mutex::new(Record {
            lanes: lanes
                .iter()
                .map(|_| Seen {
                    arrivals: Vec::with_capacity(256 * 1024),
                    ..Seen::default()
                })
                .collect(),
            stray: 0,
        }));
        let (stop, stopped) = oneshot::channel();
        let answer = Arc::new(AtomicU16::new(StatusCode::NO_CONTENT.as_u16()));
        let state = Arc::new(State {
            record: Arc::clone(&record),
            lanes,
            answer: Arc::clone(&answer),
        });
        let thread = std::thread::Builder::new()
            .name("downstream".to_owned())
            .spawn(move || {
                runtime.block_on(async move {
                    match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => {
                            tokio::select! {
                                () = accept_loop(listener, state) => {}
                                _ = stopped => {}
                            }
                        }
                        Err(e) => eprintln!("downstream: cannot register the listener: {e}"),
                    }
                });
                // Dropping the runtime here closes every open connection.
            })
            .context("starting the downstream thread")?;
        Ok(Downstream {
            addr,
            record,
            answer,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Answers every request from now on with `status` (204 until called):
    /// a destination going down (503) or coming back (204). A request
    /// whose head arrived before the switch may still get the old status;
    /// each arrival records the one it got.
    pub fn set_status(&self, status: StatusCode) {
        self.answer.store(status.as_u16(), Ordering::SeqCst);
    }

    /// Distinct delivery ids lane `lane` has seen answered 2xx so far.
    pub fn distinct(&self, lane: usize) -> usize {
        self.lock().lanes[lane].first.len()
    }

    /// Runs `f` over what lane `lane` has seen so far.
    pub fn with_seen<T>(&self, lane: usize, f: impl FnOnce(&Seen) -> T) -> T {
        f(&self.lock().lanes[lane])
    }

    /// Requests to a path no lane serves.
    pub fn stray(&self) -> u64 {
        self.lock().stray
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Record> {
        // A panic while holding the lock cannot leave `Record` half-updated
        // in a way that matters for counting; keep going.
        self.record.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops serving and joins the thread.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Downstream {
    fn drop(&mut self) {
        self.stop();
    }
}

struct State {
    record: Arc<Mutex<Record>>,
    /// `(path, check)` per lane.
    lanes: Vec<(String, Check)>,
    answer: Arc<AtomicU16>,
}

async fn accept_loop(listener: tokio::net::TcpListener, state: Arc<State>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: pause, then go on.
                eprintln!("downstream: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| handle(Arc::clone(&state), req));
            // A connection hookbox drops mid-request is hookbox's business;
            // what arrived is already recorded.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Empty<Bytes>>, Infallible> {
    let at = Instant::now();
    // Read once: the request is recorded with the status it gets.
    let status =
        StatusCode::from_u16(state.answer.load(Ordering::SeqCst)).unwrap_or(StatusCode::NO_CONTENT);
    let (parts, body) = req.into_parts();
    let lane = state
        .lanes
        .iter()
        .position(|(path, _)| path == parts.uri.path());
    let id = header(&parts.headers, "x-github-delivery")
        .or_else(|| header(&parts.headers, "x-hookbox-delivery-id"))
        .map(str::to_owned);
    let body = body.collect().await.map(|b| b.to_bytes());
    let Some(lane) = lane else {
        state.record.lock().unwrap_or_else(|e| e.into_inner()).stray += 1;
        return Ok(answer(status));
    };
    let signature_ok = match &body {
        Ok(body) => state.lanes[lane].1.passes(&parts.headers, body),
        Err(_) => false,
    };
    {
        let mut record = state.record.lock().unwrap_or_else(|e| e.into_inner());
        let seen = &mut record.lanes[lane];
        if body.is_err() {
            seen.body_errors += 1;
        }
        if !signature_ok {
            seen.bad_signature += 1;
        }
        if !status.is_success() {
            seen.refused += 1;
        }
        match id {
            Some(delivery_id) => {
                if status.is_success() {
                    seen.first.entry(delivery_id.clone()).or_insert(at);
                }
                seen.arrivals.push(Arrival {
                    at,
                    delivery_id,
                    status: status.as_u16(),
                });
            }
            None => seen.no_id += 1,
        }
    }
    Ok(answer(status))
}

/// An empty answer with `status` (no `Retry-After`: a 503 without one is
/// a plain failed attempt to hookbox, not a request to hold off).
fn answer(status: StatusCode) -> Response<Empty<Bytes>> {
    let mut resp = Response::new(Empty::new());
    *resp.status_mut() = status;
    resp
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Standard Webhooks: `webhook-signature` holds space-separated
/// `v1,<base64 HMAC-SHA256>` entries over `id.timestamp.body`; one must
/// match.
fn verify(key: &[u8], headers: &HeaderMap, body: &[u8]) -> bool {
    let (Some(id), Some(ts), Some(sigs)) = (
        header(headers, "webhook-id"),
        header(headers, "webhook-timestamp"),
        header(headers, "webhook-signature"),
    ) else {
        return false;
    };
    let want = sign(key, id, ts, body);
    sigs.split(' ')
        .filter_map(|s| s.strip_prefix("v1,"))
        .any(|s| s == want)
}

/// The base64 Standard Webhooks signature of one request.
pub fn sign(key: &[u8], id: &str, ts: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(ts.as_bytes());
    mac.update(b".");
    mac.update(body);
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// A `whsec_` secret for `key`, as the hookbox config takes it.
pub fn whsec(key: &[u8]) -> String {
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(key)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;
    use hyper::header::HeaderValue;

    /// POSTs `body` to `path`, signed with `key`, on a fresh connection;
    /// expects a 204.
    async fn post(addr: SocketAddr, path: &str, key: &[u8], id: &str, body: &[u8]) {
        assert_eq!(
            post_status(addr, path, key, id, body).await,
            StatusCode::NO_CONTENT
        );
    }

    /// As [`post`], returning the status.
    async fn post_status(
        addr: SocketAddr,
        path: &str,
        key: &[u8],
        id: &str,
        body: &[u8],
    ) -> StatusCode {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        let req = Request::post(path)
            .header("host", addr.to_string())
            .header("x-github-delivery", id)
            .header("webhook-id", id)
            .header("webhook-timestamp", "1700000000")
            .header(
                "webhook-signature",
                format!("v1,{}", sign(key, id, "1700000000", body)),
            )
            .body(Full::new(Bytes::copy_from_slice(body)))
            .unwrap();
        sender.send_request(req).await.unwrap().status()
    }

    #[tokio::test]
    async fn a_switched_status_is_answered_and_only_2xx_counts_as_delivered() {
        let key = b"key".to_vec();
        let mut d = Downstream::start(vec![("/hook".into(), Check::Signed(key.clone()))]).unwrap();
        d.set_status(StatusCode::SERVICE_UNAVAILABLE);
        let down = post_status(d.addr, "/hook", &key, "one", b"{}").await;
        assert_eq!(down, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(d.distinct(0), 0);
        d.set_status(StatusCode::NO_CONTENT);
        post(d.addr, "/hook", &key, "one", b"{}").await;
        d.stop();
        d.with_seen(0, |seen| {
            let statuses: Vec<u16> = seen.arrivals.iter().map(|a| a.status).collect();
            assert_eq!(statuses, [503, 204]);
            assert_eq!(seen.refused, 1);
            assert_eq!(seen.first.get("one"), Some(&seen.arrivals[1].at));
        });
    }

    #[tokio::test]
    async fn each_path_is_a_lane_with_its_own_key_and_other_paths_are_stray() {
        let (ka, kb) = (b"key-a".to_vec(), b"key-b".to_vec());
        let mut d = Downstream::start(vec![
            ("/a".into(), Check::Signed(ka.clone())),
            ("/b".into(), Check::Signed(kb.clone())),
        ])
        .unwrap();
        post(d.addr, "/a", &ka, "one", b"{}").await;
        post(d.addr, "/a", &ka, "one", b"{}").await;
        post(d.addr, "/b", &kb, "one", b"{}").await;
        // Signed with a's key: b counts a bad signature.
        post(d.addr, "/b", &ka, "two", b"{}").await;
        post(d.addr, "/hook", &ka, "three", b"{}").await;
        d.stop();
        d.with_seen(0, |a| {
            assert_eq!(
                (a.arrivals.len(), a.first.len(), a.bad_signature),
                (2, 1, 0)
            );
        });
        d.with_seen(1, |b| {
            assert_eq!(
                (b.arrivals.len(), b.first.len(), b.bad_signature),
                (2, 2, 1)
            );
        });
        assert_eq!((d.distinct(0), d.distinct(1), d.stray()), (1, 2, 1));
    }

    #[tokio::test]
    async fn a_body_lane_counts_bodies_that_are_not_the_ones_sent() {
        let signer = Arc::new(Signer::new(b"bench-secret", 7).unwrap());
        let mut d =
            Downstream::start(vec![("/hook".into(), Check::Body(Arc::clone(&signer)))]).unwrap();
        let (one, two) = (signer.delivery(0, 1), signer.delivery(0, 2));
        post(d.addr, "/hook", b"any", &one.id, &one.body).await;
        // Another delivery's body under this id, and a truncated body.
        post(d.addr, "/hook", b"any", &one.id, &two.body).await;
        post(d.addr, "/hook", b"any", &two.id, &two.body[1..]).await;
        d.stop();
        d.with_seen(0, |seen| {
            assert_eq!((seen.arrivals.len(), seen.first.len()), (3, 2));
            assert_eq!(seen.bad_signature, 2);
        });
    }

    #[test]
    fn verifies_the_standard_webhooks_reference_vector() {
        // The reference libraries' test vector (Go, JavaScript, Python).
        let key = base64::engine::general_purpose::STANDARD
            .decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
            .unwrap();
        let mut h = HeaderMap::new();
        h.insert(
            "webhook-id",
            HeaderValue::from_static("msg_p5jXN8AQM9LWM0D4loKWxJek"),
        );
        h.insert("webhook-timestamp", HeaderValue::from_static("1614265330"));
        h.insert(
            "webhook-signature",
            HeaderValue::from_static("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="),
        );
        let body = br#"{"test": 2432232314}"#;
        assert!(verify(&key, &h, body));
        assert!(!verify(&key, &h, b"{}"));
        h.insert(
            "webhook-signature",
            HeaderValue::from_static("v1,bad v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="),
        );
        assert!(verify(&key, &h, body));
        assert!(whsec(&key).starts_with("whsec_MfKQ9r8G"));
    }
}
