//! Loopback HTTP servers for the tests: [`Downstream`], an axum server
//! that records every request hookbox delivers (headers, body, arrival)
//! and answers per a script; and the plumbing the fake provider APIs
//! share ([`serve_loopback`], [`query_pairs`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use hookbox::config::Secret;
use hookbox::ingress::receive::payload::Inbound;
use hookbox::ingress::receive::standard::Standard;

use super::eventually;
use super::signing::now_secs;

/// hookbox's outbound signing secret in every test (`whsec_` + base64).
pub const SIGNING_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// What the downstream answers to one request.
#[derive(Debug, Clone)]
pub struct Reply {
    status: StatusCode,
    /// Held this long before answering.
    delay: Duration,
    /// Held until this gate opens before answering.
    gate: Option<Gate>,
    retry_after: Option<&'static str>,
}

/// Holds the requests given [`Reply::until`] until the test opens it: an
/// attempt kept running exactly as long as the test needs, not a guess.
#[derive(Debug, Clone)]
pub struct Gate(Arc<tokio::sync::Semaphore>);

impl Gate {
    pub fn new() -> Gate {
        Gate(Arc::new(tokio::sync::Semaphore::new(0)))
    }

    /// Lets every held request, and every later one, through.
    pub fn open(&self) {
        self.0.close();
    }

    async fn pass(&self) {
        // Nothing is ever released but by closing: the error is the signal.
        let _ = self.0.acquire().await;
    }
}

impl Reply {
    pub fn status(code: u16) -> Reply {
        Reply {
            status: StatusCode::from_u16(code).unwrap(),
            delay: Duration::ZERO,
            gate: None,
            retry_after: None,
        }
    }

    pub fn after(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }

    pub fn until(mut self, gate: Gate) -> Reply {
        self.gate = Some(gate);
        self
    }

    pub fn retry_after(mut self, value: &'static str) -> Reply {
        self.retry_after = Some(value);
        self
    }
}

/// Chooses the answer from the request's `x-hookbox-delivery-id` and how
/// many requests with its `webhook-id` arrived so far, this one included.
pub type Script = Arc<dyn Fn(&str, usize) -> Reply + Send + Sync>;

/// One request as the downstream saw it.
#[derive(Debug, Clone)]
pub struct Hit {
    pub at: Instant,
    pub method: Method,
    /// The path and query asked for.
    pub uri: Uri,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// What the script answered.
    pub status: StatusCode,
}

impl Hit {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .unwrap_or_else(|| panic!("no {name} header in {:?}", self.headers))
            .to_str()
            .unwrap()
    }

    pub fn delivery(&self) -> &str {
        self.header("x-hookbox-delivery-id")
    }

    pub fn ok(&self) -> bool {
        self.status.is_success()
    }
}

struct Shared {
    hits: Mutex<Vec<Hit>>,
    script: Mutex<Script>,
    /// Requests being answered now, and the most there ever were.
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

/// A downstream HTTP server on loopback that records every request.
pub struct Downstream {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Downstream {
    pub async fn start(script: impl Fn(&str, usize) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve(listener, Arc::new(script))
    }

    /// Starts on `addr`, which something else may have held before.
    pub async fn start_on(
        addr: SocketAddr,
        script: impl Fn(&str, usize) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind(addr)
            .await
            .unwrap_or_else(|e| panic!("cannot bind the downstream again on {addr}: {e}"));
        Self::serve(listener, Arc::new(script))
    }

    fn serve(listener: TcpListener, script: Script) -> Self {
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            hits: Mutex::new(Vec::new()),
            script: Mutex::new(script),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        });
        let router = Router::new().fallback(record).with_state(shared.clone());
        let task = serve(listener, router);
        Downstream { addr, shared, task }
    }

    /// The URL hookbox delivers to.
    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    pub fn set_script(&self, script: impl Fn(&str, usize) -> Reply + Send + Sync + 'static) {
        *self.shared.script.lock().unwrap() = Arc::new(script);
    }

    /// Every request so far, in arrival order.
    pub fn hits(&self) -> Vec<Hit> {
        self.shared.hits.lock().unwrap().clone()
    }

    /// The requests for one delivery id, in arrival order.
    pub fn hits_for(&self, delivery: &str) -> Vec<Hit> {
        self.hits()
            .into_iter()
            .filter(|h| h.delivery() == delivery)
            .collect()
    }

    /// The most requests that were ever being answered at once.
    pub fn max_in_flight(&self) -> usize {
        self.shared.max_in_flight.load(Ordering::SeqCst)
    }

    /// Waits until at least `n` requests arrived.
    pub async fn wait_for_hits(&self, n: usize) -> Vec<Hit> {
        eventually(&format!("{n} requests at the downstream"), || {
            let hits = self.hits();
            (hits.len() >= n).then_some(hits)
        })
        .await
    }
}

impl Drop for Downstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Counts a request as being answered until dropped, also when hookbox
/// gives up on it mid-way.
struct InFlight<'a>(&'a Shared);

impl<'a> InFlight<'a> {
    fn enter(shared: &'a Shared) -> Self {
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.max_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(shared)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn record(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let at = Instant::now();
    let _in_flight = InFlight::enter(&shared);
    let reply = {
        let mut hits = shared.hits.lock().unwrap();
        let id = headers.get("webhook-id").cloned();
        let nth = 1 + hits
            .iter()
            .filter(|h| id.is_some() && h.headers.get("webhook-id") == id.as_ref())
            .count();
        let delivery = headers
            .get("x-hookbox-delivery-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let script = shared.script.lock().unwrap().clone();
        let reply = script(&delivery, nth);
        hits.push(Hit {
            at,
            method,
            uri,
            headers,
            body,
            status: reply.status,
        });
        reply
    };
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    if let Some(gate) = &reply.gate {
        gate.pass().await;
    }
    let mut response = reply.status.into_response();
    if let Some(value) = reply.retry_after {
        response
            .headers_mut()
            .insert("retry-after", HeaderValue::from_static(value));
    }
    response
}

/// Serves `router` on `listener` until the task is aborted or the test's
/// runtime ends.
pub fn serve(listener: TcpListener, router: Router) -> JoinHandle<()> {
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() })
}

/// Binds 127.0.0.1 on a port the kernel picks and serves the router that
/// `router` makes for that address (a fake API that links to itself needs
/// it).
pub async fn serve_loopback(
    router: impl FnOnce(SocketAddr) -> Router,
) -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (addr, serve(listener, router(addr)))
}

/// The query string of `uri` as name -> value, with `[` and `]` decoded
/// (Stripe's `created[gte]`).
pub fn query_pairs(uri: &Uri) -> HashMap<String, String> {
    let decode = |s: &str| s.replace("%5B", "[").replace("%5D", "]");
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

/// Verifies a forwarded request the way the user's app would, with
/// hookbox's own Standard Webhooks verifier, against the destination's
/// `secret` ([`SIGNING_SECRET`] in most tests).
pub fn verify_signature_with(secret: &str, hit: &Hit) -> Result<(), String> {
    Standard::new(&[Secret::new(secret)], 300)
        .verify(&Inbound::new(&hit.headers, &hit.body), now_secs())
        .map_err(|e| format!("{e:?}"))
}
