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
//! cap, the connection that has been idle longest is closed to make room:
//! one with no request running (it never sent one, sits between keep-alive
//! requests, or is still in its TLS handshake), or one whose request is
//! still waiting for its body, idle since its last byte arrived. So neither
//! a flood of connections that send nothing nor uploads that stall can lock
//! real deliveries out until a timeout. A request whose body is all in
//! (being verified, stored or answered) is not chosen: when every
//! connection is running one, new connections wait in the kernel's listen
//! queue rather than being refused, and the first to go idle makes room.
//! (An idle keep-alive connection chosen just as its next request begins
//! loses that request; if it was stored, the provider's retry is answered
//! "duplicate", so nothing is lost.)
//!
//! With a TLS acceptor (`[server.tls]`, see `crate::ingress::tls`) each connection
//! first completes a TLS handshake, in its own task so a slow client
//! cannot stall the accept loop. The handshake holds a connection slot and
//! must finish within the header timeout, so a client that opens TCP and
//! never finishes it is cut off like one that never sends headers; the
//! headers then get the header timeout of their own.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::{Body as _, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::Service as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

fn now_ms() -> u64 {
    u64::try_from(crate::support::clock::now_ms()).unwrap_or(0)
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
        // listen queue) until a slot frees or a connection goes idle.
        let slot = loop {
            if let Ok(slot) = slots.clone().try_acquire_owned() {
                break Some(slot);
            }
            // Listening before looking, so a connection that goes idle
            // in between is not missed.
            let went_idle = conns.went_idle.notified();
            tokio::pin!(went_idle);
            went_idle.as_mut().enable();
            conns.evict_longest_idle();
            tokio::select! {
                () = shutdown.cancelled() => break None,
                slot = slots.clone().acquire_owned() => break slot.ok(),
                () = went_idle => {}
            }
        };
        let Some(slot) = slot else { break };
        // Small JSON answers: send them now rather than wait for more.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let state = conns.register();
        let service = with_peer(
            TowerToHyperService::new(router.clone()),
            peer,
            state.clone(),
            conns.clone(),
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
                if stream.get_ref().1.alpn_protocol() == Some(crate::ingress::tls::ACME_TLS_ALPN) {
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
    /// Told when a request ends (its connection can be closed now), for
    /// an accept loop waiting at the cap.
    went_idle: Notify,
}

/// What a connection is doing. HTTP/1.1 runs one request at a time on a
/// connection (pipelined ones wait their turn), so one phase describes it.
const IDLE: u8 = 0;
/// A request is running and its body has not all arrived.
const AWAITING_BODY: u8 = 1;
/// A request is running with its body all in (or dropped unread).
const RUNNING: u8 = 2;

/// One connection's activity, shared with its service.
struct ConnState {
    id: u64,
    /// [`IDLE`], [`AWAITING_BODY`] or [`RUNNING`].
    phase: AtomicU8,
    /// When a request last started or ended, a piece of its body arrived,
    /// or the connection opened: unix milliseconds.
    last_active: AtomicU64,
    evict: CancellationToken,
}

impl ConnState {
    fn touch(&self) {
        self.last_active.fetch_max(now_ms(), Ordering::Relaxed);
    }

    /// The running request's body is all in, or will not be read.
    fn body_done(&self) {
        let _ = self.phase.compare_exchange(
            AWAITING_BODY,
            RUNNING,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }
}

impl Conns {
    fn register(&self) -> Arc<ConnState> {
        let state = Arc::new(ConnState {
            id: self.next.fetch_add(1, Ordering::Relaxed),
            phase: AtomicU8::new(IDLE),
            last_active: AtomicU64::new(now_ms()),
            evict: CancellationToken::new(),
        });
        self.lock().insert(state.id, state.clone());
        state
    }

    fn forget(&self, state: &ConnState) {
        self.lock().remove(&state.id);
    }

    /// Closes the connection idle longest, if any is idle or waiting for a
    /// body, and none is already closing (its slot is on the way).
    fn evict_longest_idle(&self) {
        let open = self.lock();
        if open.values().any(|c| c.evict.is_cancelled()) {
            return;
        }
        let idle = open
            .values()
            .filter(|c| c.phase.load(Ordering::Acquire) != RUNNING && !c.evict.is_cancelled())
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
/// and marks the connection's phase and activity while it runs.
fn with_peer(
    inner: TowerToHyperService<Router>,
    peer: SocketAddr,
    state: Arc<ConnState>,
    conns: Arc<Conns>,
) -> impl hyper::service::Service<
    hyper::Request<Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future: Send,
> + Clone {
    hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let (mut parts, body) = req.into_parts();
        parts.extensions.insert(ConnectInfo(peer));
        let state = state.clone();
        let phase = if body.is_end_stream() {
            RUNNING
        } else {
            AWAITING_BODY
        };
        state.phase.store(phase, Ordering::Release);
        state.touch();
        let body = Watched {
            inner: body,
            state: state.clone(),
        };
        let call = inner.call(hyper::Request::from_parts(parts, body));
        let conns = conns.clone();
        async move {
            let response = call.await;
            state.phase.store(IDLE, Ordering::Release);
            state.touch();
            conns.went_idle.notify_waiters();
            response
        }
    })
}

/// A request body that tells its connection when a piece arrives and when
/// the body is all in (or dropped unread).
struct Watched {
    inner: Incoming,
    state: Arc<ConnState>,
}

impl hyper::body::Body for Watched {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(_))) => {
                self.state.touch();
                if self.inner.is_end_stream() {
                    self.state.body_done();
                }
            }
            Poll::Ready(_) => self.state.body_done(),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.state.body_done();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Registers connections in `phases`, each last active a second after
    /// the one before.
    fn conns(phases: &[u8]) -> (Conns, Vec<Arc<ConnState>>) {
        let conns = Conns::default();
        let states = phases
            .iter()
            .enumerate()
            .map(|(i, phase)| {
                let state = conns.register();
                state.phase.store(*phase, Ordering::Release);
                state
                    .last_active
                    .store(1_000 * (i as u64 + 1), Ordering::Relaxed);
                state
            })
            .collect();
        (conns, states)
    }

    fn evicted(states: &[Arc<ConnState>]) -> Vec<usize> {
        (0..states.len())
            .filter(|i| states[*i].evict.is_cancelled())
            .collect()
    }

    #[test]
    fn a_request_with_its_body_in_is_never_closed_for_a_newcomer() {
        let (conns, states) = conns(&[RUNNING, RUNNING]);
        conns.evict_longest_idle();
        assert_eq!(evicted(&states), Vec::<usize>::new());
    }

    #[test]
    fn an_upload_stalled_longest_is_closed_like_an_idle_connection() {
        // Oldest first: a running request, a stalled upload, an idle one.
        let (conns, states) = conns(&[RUNNING, AWAITING_BODY, IDLE]);
        conns.evict_longest_idle();
        assert_eq!(evicted(&states), vec![1]);
        // Its slot is on the way: nothing else is closed meanwhile.
        conns.evict_longest_idle();
        assert_eq!(evicted(&states), vec![1]);
        conns.forget(&states[1]);
        conns.evict_longest_idle();
        assert_eq!(evicted(&states), vec![1, 2]);
    }

    #[test]
    fn a_piece_of_body_is_activity() {
        let (conns, states) = conns(&[AWAITING_BODY, IDLE]);
        states[0].touch();
        conns.evict_longest_idle();
        assert_eq!(evicted(&states), vec![1]);
    }

    #[test]
    fn the_body_is_done_only_while_the_request_awaits_it() {
        let (_conns, states) = conns(&[AWAITING_BODY, IDLE]);
        states[0].body_done();
        assert_eq!(states[0].phase.load(Ordering::Acquire), RUNNING);
        // A body dropped after its request ended does not mark the
        // connection busy.
        states[1].body_done();
        assert_eq!(states[1].phase.load(Ordering::Acquire), IDLE);
    }
}
