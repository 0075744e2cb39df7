//! Storing a backlog before a consumer runs: `n` new events over many
//! keep-alive connections, as fast as the server takes them.

use anyhow::{Context, Result, bail};
use hyper::StatusCode;
use hyper::header::HeaderValue;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::POLL;
use crate::load;
use crate::payload::Signer;

/// A request storing an event that gets no answer this long is tried again.
const STORE_TIMEOUT: Duration = Duration::from_secs(30);

/// What [`fill`] stored.
#[derive(Default)]
pub struct Filled {
    /// Delivery ids answered 202 (or 200: stored by an earlier try whose
    /// answer was lost).
    pub ids: HashSet<String>,
    pub unavailable: u64,
    pub errors: u64,
    pub wall: Duration,
}

/// Stores `n` new events over `connections` keep-alive connections, as
/// fast as the server takes them; a 503 or a failed request is tried
/// again. Gives up after `cap`.
pub async fn fill(
    addr: SocketAddr,
    signer: Arc<Signer>,
    n: u64,
    connections: u32,
    cap: Duration,
) -> Result<Filled> {
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(1));
    let host =
        HeaderValue::from_str(&addr.to_string()).context("the server address as a host header")?;
    let tasks: Vec<_> = (0..connections)
        .map(|_| {
            let (next, signer, host) = (Arc::clone(&next), Arc::clone(&signer), host.clone());
            tokio::spawn(
                async move { fill_one(addr, &signer, &host, &next, n, started + cap).await },
            )
        })
        .collect();
    let mut all = Filled::default();
    for task in tasks {
        let one = task.await.context("a fill connection panicked")??;
        all.ids.extend(one.ids);
        all.unavailable += one.unavailable;
        all.errors += one.errors;
    }
    all.wall = started.elapsed();
    if (all.ids.len() as u64) < n {
        bail!(
            "stored {} of {n} events within {cap:?} ({} 503s, {} failed requests)",
            all.ids.len(),
            all.unavailable,
            all.errors
        );
    }
    Ok(all)
}

/// One connection of [`fill`]: stores the next number from `next` until
/// it passes `n` or `until` comes.
async fn fill_one(
    addr: SocketAddr,
    signer: &Signer,
    host: &HeaderValue,
    next: &AtomicU64,
    n: u64,
    until: Instant,
) -> Result<Filled> {
    let mut out = Filled::default();
    let mut sender = None;
    let mut seq = next.fetch_add(1, Ordering::Relaxed);
    while seq <= n && Instant::now() < until {
        let mut s = match sender.take() {
            Some(s) => s,
            None => match load::connect(addr).await {
                Ok(s) => s,
                Err(_) => {
                    out.errors += 1;
                    tokio::time::sleep(POLL).await;
                    continue;
                }
            },
        };
        let d = signer.delivery(0, seq);
        let id = d.id.clone();
        let sent = tokio::time::timeout(STORE_TIMEOUT, load::send(&mut s, load::request(d, host)));
        match sent.await {
            // 200: stored by an earlier try whose answer was lost.
            Ok(Ok((status, _))) if status.is_success() => {
                out.ids.insert(id);
                seq = next.fetch_add(1, Ordering::Relaxed);
                sender = Some(s);
            }
            Ok(Ok((StatusCode::SERVICE_UNAVAILABLE, _))) => {
                out.unavailable += 1;
                sender = Some(s);
                tokio::time::sleep(POLL).await;
            }
            Ok(Ok((status, body))) => bail!(
                "storing an event answered {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ),
            // The connection goes with the failed request.
            Ok(Err(_)) | Err(_) => out.errors += 1,
        }
    }
    Ok(out)
}
