//! The HTTP/1.1 accept loop both listeners run.
//!
//! hyper is driven directly rather than through `axum::serve` because the
//! receiver needs knobs `axum::serve` does not expose: a header read timeout
//! (a client that trickles its headers is cut off) and graceful shutdown
//! that lets requests in flight finish while idle keep-alive connections
//! close at once.
//!
//! Each request carries its connection's peer address as an
//! `axum::extract::ConnectInfo<SocketAddr>` extension (`crate::edge` reads
//! it). At most `max_connections` connections are served at once. At the
//! cap, the connection that has been idle longest (no request running:
//! never sent one, between keep-alive requests, or still in its TLS
//! handshake) is closed to make room, so a flood of connections that send
//! nothing cannot lock real deliveries out until the header timeout; when
//! every connection is running a request, new ones wait in the kernel's
//! listen queue rather than being refused.
//!
//! With a TLS acceptor (`[server.tls]`, see `crate::tls`) each connection
//! first completes a TLS handshake, in its own task so a slow client
//! cannot stall the accept loop. The handshake holds a connection slot and
//! must finish within the header timeout, so a client that opens TCP and
//! never finishes it is cut off like one that never sends headers; the
//! headers then get the header timeout of their own.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::server::conn::http1;
use hyper::service::Service as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

fn now_ms() -> u64 {
    u64::try_from(crate::clock::now_ms()).unwrap_or(0)
}

/// How long in-flight requests get to finish after shutdown begins.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `router` on `listener` until `shutdown` fires, then waits for the
/// requests in flight (up to [`DRAIN_TIMEOUT`]). At most `max_connections`
/// are open at once. With `tls`, every connection is TLS.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<TlsAcceptor>,
    header_timeout: Duration,
    max_connections: usize,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(max_connections));
    let conns = Arc::new(Conns::default());
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(true);
    loop {
        // A slot first, then a connection: at the cap, what arrives waits
        // in the listen queue.
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off rather
                    // than spin, and keep serving the connections we have.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // A slot for the connection in hand: at the cap, the connection
        // idle longest makes room; when every one is running a request,
        // this one waits (and the loop with it, so the rest wait in the
        // listen queue).
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                conns.evict_longest_idle();
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    slot = slots.clone().acquire_owned() => match slot {
                        Ok(slot) => slot,
                        Err(_) => break,
                    },
                }
            }
        };
        // Small JSON answers: send them now rather than wait for more.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let state = conns.register();
        let service = with_peer(
            TowerToHyperService::new(router.clone()),
            peer,
            state.clone(),
        );
        let Some(tls) = tls.clone() else {
            let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
            let conns = conns.clone();
            tokio::spawn(async move {
                tokio::select! {
                    ended = conn => if let Err(e) = ended {
                        tracing::debug!(error = %e, "connection ended with an error");
                    },
                    () = state.evict.cancelled() => tracing::debug!("closed an idle connection at the cap"),
                }
                conns.forget(&state);
                drop(slot);
            });
            continue;
        };
        // Subscribed now, before any shutdown: a connection whose handshake
        // ends after shutdown began is then closed as soon as it is idle.
        let watcher = graceful.watcher();
        let builder = builder.clone();
        let stopping = shutdown.clone();
        let conns = conns.clone();
        tokio::spawn(async move {
            let serve = async {
                let handshake = tokio::time::timeout(header_timeout, tls.accept(stream));
                let stream = tokio::select! {
                    () = stopping.cancelled() => return,
                    done = handshake => match done {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!("TLS handshake not finished within the header timeout");
                            return;
                        }
                    },
                };
                if stream.get_ref().1.alpn_protocol() == Some(crate::tls::ACME_TLS_ALPN) {
                    // A TLS-ALPN-01 validation: the handshake was all of it.
                    return;
                }
                let conn = watcher.watch(builder.serve_connection(TokioIo::new(stream), service));
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
            };
            tokio::select! {
                () = serve => {}
                () = state.evict.cancelled() => tracing::debug!("closed an idle connection at the cap"),
            }
            conns.forget(&state);
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still running after {DRAIN_TIMEOUT:?}; closing them");
        // Their tasks hold the router, and with it a writer handle: left
        // running, the writer could not stop until the runtime is torn down.
        conns.close_all();
    }
}

/// The open connections of one listener, for choosing which to close at
/// the cap.
#[derive(Default)]
struct Conns {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<ConnState>>>,
}

/// One connection's activity, shared with its service.
struct ConnState {
    id: u64,
    /// Requests running on it now.
    busy: AtomicUsize,
    /// When a request last started or ended (or the connection opened),
    /// unix milliseconds.
    last_active: AtomicU64,
    evict: CancellationToken,
}

impl Conns {
    fn register(&self) -> Arc<ConnState> {
        let state = Arc::new(ConnState {
            id: self.next.fetch_add(1, Ordering::Relaxed),
            busy: AtomicUsize::new(0),
            last_active: AtomicU64::new(now_ms()),
            evict: CancellationToken::new(),
        });
        self.lock().insert(state.id, state.clone());
        state
    }

    fn forget(&self, state: &ConnState) {
        self.lock().remove(&state.id);
    }

    /// Closes the connection idle longest, if any connection is idle.
    fn evict_longest_idle(&self) {
        let open = self.lock();
        let idle = open
            .values()
            .filter(|c| c.busy.load(Ordering::Acquire) == 0 && !c.evict.is_cancelled())
            .min_by_key(|c| c.last_active.load(Ordering::Relaxed));
        if let Some(conn) = idle {
            conn.evict.cancel();
        }
    }

    /// Closes every connection, busy or not.
    fn close_all(&self) {
        for conn in self.lock().values() {
            conn.evict.cancel();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<ConnState>>> {
        // Nothing can panic while the map is held half-updated.
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Wraps a connection's service so each request carries the peer address,
/// and counts as activity on the connection while it runs.
fn with_peer(
    inner: TowerToHyperService<Router>,
    peer: SocketAddr,
    state: Arc<ConnState>,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future: Send,
> + Clone {
    hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        let state = state.clone();
        state.busy.fetch_add(1, Ordering::AcqRel);
        state.last_active.fetch_max(now_ms(), Ordering::Relaxed);
        let call = inner.call(req);
        async move {
            let response = call.await;
            state.busy.fetch_sub(1, Ordering::AcqRel);
            state.last_active.fetch_max(now_ms(), Ordering::Relaxed);
            response
        }
    })
}
