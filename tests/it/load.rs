//! Load for the kill tests: a pool of clients, each with its own
//! connection pool, posting distinct deliveries as fast as hookbox answers
//! and recording what it answered 2xx (the promise a kill must keep).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

/// What the clients send.
pub struct Traffic<K> {
    /// The `n`-th request (from 0) of the client named `prefix`, with the
    /// key a 2xx for it acknowledges.
    pub request: fn(&reqwest::Client, SocketAddr, &str, usize) -> (K, reqwest::RequestBuilder),
    /// Whether to read the row id from each 2xx answer.
    pub read_row: bool,
}

// Derived, these would ask for `K: Copy`.
impl<K> Clone for Traffic<K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for Traffic<K> {}

/// A request hookbox answered 2xx, with the row id it gave (`None` when
/// the body is not read, or the kill cut it after the status line).
#[derive(Debug, Clone)]
pub struct Acked<K> {
    pub key: K,
    pub row: Option<i64>,
}

pub struct ClientReport<K> {
    pub acked: Vec<Acked<K>>,
    pub statuses: HashMap<u16, usize>,
    pub errors: usize,
}

impl<K> Default for ClientReport<K> {
    fn default() -> Self {
        ClientReport {
            acked: Vec::new(),
            statuses: HashMap::new(),
            errors: 0,
        }
    }
}

impl<K> ClientReport<K> {
    /// Unique ids are new: 202, or 503 if the server is saturated.
    pub fn assert_only_expected_statuses(&self) {
        let unexpected: Vec<_> = self
            .statuses
            .iter()
            .filter(|(s, _)| !matches!(s, 202 | 503))
            .collect();
        assert!(
            unexpected.is_empty(),
            "unexpected statuses: {:?}",
            self.statuses
        );
    }
}

/// Clients posting distinct deliveries as fast as the server answers.
pub struct Load<K> {
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
    tasks: Vec<JoinHandle<ClientReport<K>>>,
}

impl<K: Send + 'static> Load<K> {
    /// `clients` clients posting `traffic` to `addr`, the client `c` named
    /// `{prefix}-t{c}`.
    pub fn start(addr: SocketAddr, prefix: &str, clients: usize, traffic: Traffic<K>) -> Load<K> {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicUsize::new(0));
        let tasks = (0..clients)
            .map(|c| {
                let prefix = format!("{prefix}-t{c}");
                tokio::spawn(client_loop(
                    addr,
                    prefix,
                    traffic,
                    stop.clone(),
                    acked.clone(),
                ))
            })
            .collect();
        Load { stop, acked, tasks }
    }

    /// Waits until `count` deliveries are acknowledged or `at_most` passed.
    pub async fn wait_for(&self, count: usize, at_most: Duration) {
        let deadline = Instant::now() + at_most;
        while self.acked.load(Ordering::Relaxed) < count && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    pub async fn stop(self) -> ClientReport<K> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = ClientReport::default();
        for task in self.tasks {
            let report = tokio::time::timeout(Duration::from_secs(15), task)
                .await
                .expect("a client stops once told to")
                .unwrap();
            all.acked.extend(report.acked);
            for (status, n) in report.statuses {
                *all.statuses.entry(status).or_default() += n;
            }
            all.errors += report.errors;
        }
        all
    }
}

async fn client_loop<K>(
    addr: SocketAddr,
    prefix: String,
    traffic: Traffic<K>,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicUsize>,
) -> ClientReport<K> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut report = ClientReport::default();
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let (key, request) = (traffic.request)(&client, addr, &prefix, n);
        n += 1;
        match request.send().await {
            Ok(r) => {
                let status = r.status().as_u16();
                *report.statuses.entry(status).or_default() += 1;
                if r.status().is_success() {
                    // The status line is the promise; the body may be cut.
                    let row = if traffic.read_row {
                        r.json::<serde_json::Value>()
                            .await
                            .ok()
                            .and_then(|v| v["id"].as_i64())
                    } else {
                        None
                    };
                    report.acked.push(Acked { key, row });
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(_) => {
                report.errors += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
    report
}
