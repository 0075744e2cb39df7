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
//! it). At most `max_connections` connections are served at once: at the
//! cap the loop stops accepting until one closes, so new connections wait
//! in the kernel's listen queue rather than being refused. A provider's
//! delivery arriving during a flood is then delayed, not failed, while the
//! header timeout keeps idle or slow connections from holding slots for
//! long.
//!
//! With a TLS acceptor (`[server.tls]`, see `crate::tls`) each connection
//! first completes a TLS handshake, in its own task so a slow client
//! cannot stall the accept loop. The handshake holds a connection slot and
//! must finish within the header timeout, so a client that opens TCP and
//! never finishes it is cut off like one that never sends headers; the
//! headers then get the header timeout of their own.

use std::net::SocketAddr;
use std::sync::Arc;
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
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(true);
    loop {
        // A slot first, then a connection: at the cap, what arrives waits
        // in the listen queue.
        let slot = tokio::select! {
            () = shutdown.cancelled() => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
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
        // Small JSON answers: send them now rather than wait for more.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let service = with_peer(TowerToHyperService::new(router.clone()), peer);
        let Some(tls) = tls.clone() else {
            let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                drop(slot);
            });
            continue;
        };
        // Subscribed now, before any shutdown: a connection whose handshake
        // ends after shutdown began is then closed as soon as it is idle.
        let watcher = graceful.watcher();
        let builder = builder.clone();
        let stopping = shutdown.clone();
        tokio::spawn(async move {
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
            let conn = watcher.watch(builder.serve_connection(TokioIo::new(stream), service));
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still running after {DRAIN_TIMEOUT:?}; closing them");
    }
}

/// Wraps a connection's service so each request carries the peer address.
fn with_peer(
    inner: TowerToHyperService<Router>,
    peer: SocketAddr,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future: Send,
> + Clone {
    hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        inner.call(req)
    })
}
