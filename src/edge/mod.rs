//! The edge: what is decided about a request from its headers, and what its
//! body may hold while it is read.
//!
//! For `POST /hooks/{source}`, in this order:
//!
//! 1. **Who is asking** ([`client_addr`]): the TCP peer, or, behind a peer in
//!    `server.trusted_proxies`, the first untrusted hop of its forwarding
//!    header read from the right. A header a trusted proxy wrote that names
//!    no client is refused: 400 `malformed_forwarding_header` or
//!    `unknown_client`.
//! 2. **May it post to this source** (`allow_ips`: CIDRs and the named sets
//!    of [`sets`]): if not, 403 `forbidden_address`.
//! 3. **Has it been failing verification** ([`limit`]): if it is blocked,
//!    429 `too_many_failures` with `Retry-After`. Failures are 401s and
//!    bodies not sent within `body_timeout` (408).
//! 4. **How much body may it hold** ([`bodies`]): bytes are charged as they
//!    arrive against the process's budget and the address's share; over
//!    either, 503 `unavailable` with `Retry-After`.
//!
//! Refusals are counted in `hookbox_edge_refused_total{source,reason}` and
//! never logged with the address (debug level names the source only).
//! `crate::ingress::receive` calls [`Edge::client`] and [`Edge::admit`] first,
//! [`Edge::start_body`] before reading the body, and [`Edge::failed`] after
//! a 401 or 408; the global connection cap lives in `crate::ingress::server`.

pub mod bodies;
pub mod client_addr;
pub mod limit;
pub mod sets;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::http::request::Parts;

use crate::config::{AllowIps, Config};
use crate::support::error::ApiError;
use crate::telemetry::metrics::EdgeMetrics;
use bodies::{Bodies, Charge, Refused};
use client_addr::Proxies;
use limit::FailureLimit;
use sets::NamedSets;

/// The edge's shared state: one per process, behind an `Arc`.
#[derive(Debug)]
pub struct Edge {
    proxies: Proxies,
    pub sets: Arc<NamedSets>,
    /// `None` when `edge.max_failures = 0`.
    limit: Option<FailureLimit>,
    bodies: Arc<Bodies>,
    metrics: EdgeMetrics,
}

impl Edge {
    pub fn new(config: &Config, metrics: EdgeMetrics) -> Self {
        Edge {
            proxies: Proxies::new(
                config.edge.trusted_proxies.clone(),
                config.edge.forwarded_header,
            ),
            sets: Arc::new(NamedSets::default()),
            limit: FailureLimit::new(&config.edge),
            bodies: Arc::new(Bodies::new(
                client_body_bytes(config),
                config.edge.max_client_bodies,
                metrics.clone(),
            )),
            metrics,
        }
    }

    /// The client address of a request to `source`. Without the peer
    /// address (a router driven without `crate::ingress::server`), the unspecified
    /// address stands in: it is in no allowlist.
    pub fn client(&self, source: &str, parts: &Parts) -> Result<IpAddr, ApiError> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::from([0, 0, 0, 0]), |c| c.0.ip());
        self.proxies.resolve(peer, &parts.headers).map_err(|why| {
            let reason = why.reason();
            self.metrics.refused(source, reason);
            tracing::debug!(source, reason, "refused a forwarding header");
            ApiError::UnknownClient(reason)
        })
    }

    /// The client address as [`Edge::client`] resolves it, without
    /// counting anything: for the record of a refused request, whose
    /// source may be any name a client sent. `None` when it names none.
    pub fn resolve(&self, parts: &Parts) -> Option<IpAddr> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::from([0, 0, 0, 0]), |c| c.0.ip());
        self.proxies.resolve(peer, &parts.headers).ok()
    }

    /// Why `client` is not allowed by `allow` (`not_allowed`, or
    /// `set_unavailable` while a named set has not been fetched), for the
    /// record of a 403; `None` if it is.
    pub fn forbidden(&self, allow: &AllowIps, client: IpAddr) -> Option<&'static str> {
        self.allowed(allow, client).err()
    }

    /// Starts reading a body from `client`; the charge goes with the body
    /// (see [`Edge::charge`]) and is given back when dropped.
    pub fn start_body(&self, source: &str, client: IpAddr) -> Result<Charge, ApiError> {
        self.bodies
            .start(client)
            .map_err(|why| self.body_refused(source, why))
    }

    /// Charges `n` bytes of a body that just arrived.
    pub fn charge(&self, source: &str, charge: &mut Charge, n: usize) -> Result<(), ApiError> {
        charge.add(n).map_err(|why| self.body_refused(source, why))
    }

    fn body_refused(&self, source: &str, why: Refused) -> ApiError {
        self.metrics.refused(source, why.reason());
        match why {
            // Everyone's bodies are waiting on this one: worth a warning.
            Refused::Memory => {
                tracing::warn!(
                    source,
                    "request bodies use all of their memory budget; answering 503"
                );
            }
            Refused::ClientBytes | Refused::ClientBodies => {
                tracing::debug!(
                    source,
                    reason = why.reason(),
                    "refused a body over its address's share"
                );
            }
        }
        ApiError::Unavailable
    }

    /// Decides whether `client` may post to `source`, before the body.
    pub fn admit(
        &self,
        source: &str,
        allow: Option<&AllowIps>,
        client: IpAddr,
    ) -> Result<(), ApiError> {
        if let Some(allow) = allow {
            match self.allowed(allow, client) {
                Ok(()) => {}
                Err(reason) => {
                    self.metrics.refused(source, reason);
                    tracing::debug!(source, reason, "refused an address");
                    return Err(ApiError::ForbiddenAddress);
                }
            }
        }
        if let Some(wait) = self
            .limit
            .as_ref()
            .and_then(|l| l.blocked(client, Instant::now()))
        {
            self.metrics.refused(source, "too_many_failures");
            tracing::debug!(source, "refused a blocked address");
            return Err(ApiError::TooManyFailures {
                retry_after_secs: retry_after(wait),
            });
        }
        Ok(())
    }

    /// Counts a failed verification, or a body not sent in time, from
    /// `client`.
    pub fn failed(&self, client: IpAddr) {
        if let Some(limit) = &self.limit
            && limit.failed(client, Instant::now())
        {
            self.metrics.blocked();
            tracing::debug!("blocked an address that keeps failing verification");
        }
    }

    /// `Err(reason)` for the metrics when `client` is not allowed.
    fn allowed(&self, allow: &AllowIps, client: IpAddr) -> Result<(), &'static str> {
        if allow.nets.iter().any(|net| net.contains(&client)) {
            return Ok(());
        }
        let mut unavailable = false;
        for set in &allow.sets {
            match self.sets.contains(*set, client) {
                Some(true) => return Ok(()),
                Some(false) => {}
                None => unavailable = true,
            }
        }
        Err(if unavailable {
            "set_unavailable"
        } else {
            "not_allowed"
        })
    }
}

/// What one address may hold of the body budget: `edge.max_client_body_bytes`,
/// raised to the largest body a source accepts so that every body the
/// limits allow can be read.
fn client_body_bytes(config: &Config) -> u64 {
    let largest = config.sources.iter().map(|s| s.max_body_bytes).max();
    config.edge.max_client_body_bytes.max(largest.unwrap_or(0))
}

/// Whole seconds, rounded up, never 0 (`Retry-After: 0` invites a retry
/// that would be refused).
fn retry_after(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_and_is_never_zero() {
        assert_eq!(retry_after(Duration::from_millis(300)), 1);
        assert_eq!(retry_after(Duration::from_secs(300)), 300);
        assert_eq!(retry_after(Duration::from_millis(1500)), 2);
        assert_eq!(retry_after(Duration::ZERO), 1);
    }
}
