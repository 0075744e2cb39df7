//! Wiring: the store, the writer, the routers and both listeners.
//!
//! [`App::build`] does everything that can fail at start-up (open the
//! database, bind the ports) and returns before serving, so callers (the
//! CLI, the tests) learn the bound addresses. [`App::run`] serves until the
//! token is cancelled, then shuts down in order: stop accepting, let
//! requests in flight finish, let running deliveries finish (or release
//! them), stop the maintenance jobs (retention, snapshots: see
//! [`crate::service::maintenance`]), drop every writer handle, and wait for the writer to commit what
//! is queued and checkpoint.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::alerts::{Alerter, Alerts};
use crate::catchup::CatchupHandle;
use crate::config::{Config, Secret};
use crate::delivery::alarm::Alarm;
use crate::delivery::board::{self, Board};
use crate::delivery::pull::PullHub;
use crate::delivery::push::worker::Dispatcher;
use crate::edge::Edge;
use crate::edge::sets::Refresher;
use crate::ingress::activation::{self, Inherited};
use crate::ingress::receive::Receiver;
use crate::ingress::tls::Manager as TlsManager;
use crate::service::admin::{self, AdminState};
use crate::store::{self, DatabaseLock, Store, WriterHandle, WriterThread};
use crate::telemetry::metrics::Metrics;
use crate::{ingress::server, service::health, service::maintenance, service::notify};

/// How long the writer gets to finish after the listeners have stopped.
const WRITER_STOP_TIMEOUT: Duration = Duration::from_secs(10);

pub struct App {
    /// Held until the writer has stopped: no other server may open the
    /// database meanwhile.
    lock: DatabaseLock,
    writer_thread: WriterThread,
    parts: Parts,
}

impl App {
    /// Opens the database and binds both listeners.
    pub async fn build(config: Config) -> anyhow::Result<App> {
        App::build_with(config, Inherited::default()).await
    }

    /// [`App::build`], with sockets systemd passed in place of binding.
    pub async fn build_with(config: Config, inherited: Inherited) -> anyhow::Result<App> {
        // Before anything touches the database: a second server must
        // change nothing, not even the leases the first one holds.
        let lock = DatabaseLock::acquire(&config.server.database)?;
        let (store, writer, writer_thread) = store::open(
            &config.server.database,
            config.server.durability,
            config.server.writer_queue,
            &config.search,
        )?;
        let admin_token = admin::token::resolve(&config.admin, &config.server.database)?;
        let metrics = Arc::new(Metrics::new(store.writer_metrics()));
        let edge = Arc::new(Edge::new(&config, metrics.edge()));
        let used = crate::edge::sets::used(&config);
        let refresher = if used.is_empty() {
            None
        } else {
            let refresher = Refresher::new(
                edge.sets.clone(),
                used,
                &config.edge,
                writer.clone(),
                metrics.edge(),
            )?;
            refresher.start(&store).await;
            Some(refresher)
        };
        let tls = config
            .tls
            .as_ref()
            .map(|tls| TlsManager::new(tls, metrics.tls_expiry()))
            .transpose()?;
        let public = activation::listener(inherited.public, config.server.listen, "public").await?;
        let admin =
            activation::listener(inherited.admin, config.server.admin_listen, "admin").await?;
        Ok(App {
            lock,
            writer_thread,
            parts: Parts {
                config,
                store,
                writer,
                public,
                admin,
                admin_token,
                metrics,
                edge,
                refresher,
                tls,
            },
        })
    }

    pub fn public_addr(&self) -> SocketAddr {
        self.parts
            .public
            .local_addr()
            .expect("a bound listener has an address")
    }

    pub fn admin_addr(&self) -> SocketAddr {
        self.parts
            .admin
            .local_addr()
            .expect("a bound listener has an address")
    }

    pub fn store(&self) -> &Store {
        &self.parts.store
    }

    /// Serves until `shutdown` is cancelled, then stops in order.
    ///
    /// Whatever happens on the way (a task that panicked, a part that
    /// could not start), the writer is always drained and joined before
    /// this returns, so what was answered 2xx is committed and the WAL is
    /// checkpointed; the first failure is returned after that.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let App {
            lock,
            writer_thread,
            parts,
        } = self;
        // Every writer handle lives in `parts` and the tasks it starts, all
        // gone once `serve` returns: the writer then drains and stops.
        let served = serve(parts, shutdown.clone()).await;
        if served.is_err() {
            shutdown.cancel();
        }
        let joined = tokio::task::spawn_blocking(move || writer_thread.join());
        match tokio::time::timeout(WRITER_STOP_TIMEOUT, joined).await {
            Ok(_) => {
                tracing::info!("stopped");
                drop(lock);
            }
            Err(_) => {
                tracing::error!("the writer did not stop within {WRITER_STOP_TIMEOUT:?}");
                // It may still be committing: no other server may open the
                // database until this process is gone.
                std::mem::forget(lock);
            }
        }
        served
    }
}

/// What [`App::run`] serves with, apart from the writer thread and the lock.
struct Parts {
    config: Config,
    store: Store,
    writer: WriterHandle,
    public: TcpListener,
    admin: TcpListener,
    admin_token: Secret,
    metrics: Arc<Metrics>,
    edge: Arc<Edge>,
    refresher: Option<Refresher>,
    tls: Option<TlsManager>,
}

/// Starts every part, serves until `shutdown`, and waits for all of them.
///
/// What can fail is built before any task starts, so an early error leaves
/// no task holding a writer handle. Once started, every task is awaited
/// even when one has failed, and a failed listener, dispatcher, catch-up,
/// watchdog or IP set refresh stops the others at once: a server whose
/// dispatcher panicked must not go on answering 202. (A failed TLS or
/// maintenance task is reported when the server stops.)
async fn serve(parts: Parts, shutdown: CancellationToken) -> anyhow::Result<()> {
    let Parts {
        config,
        store,
        writer,
        public,
        admin,
        admin_token,
        metrics,
        edge,
        refresher,
        tls,
    } = parts;
    let acceptor = tls.as_ref().map(TlsManager::acceptor).transpose()?;
    let wake = Arc::new(Notify::new());
    let (alerts, alert_task) = Alerts::new(
        &config,
        store.clone(),
        metrics.alerts(),
        metrics.tls_expiry(),
    )?;
    let pauses = store
        .read(crate::store::pauses::load)
        .await
        .context("reading the destinations' pauses")?;
    warn_orphans(&config, &store).await;
    let alarm = Alarm::new(alerts.clone());
    let board = Arc::new(Board::restored(&pauses).with_alerts(alarm.clone()));
    let dispatcher = Dispatcher::new(
        &config,
        store.clone(),
        writer.clone(),
        wake.clone(),
        board.clone(),
        &metrics,
    )?
    .map(|d| d.with_alerts(alarm.clone()));
    // The admin API may keep a clone of `catchup` to run a pass on demand.
    let catchup = CatchupHandle::new(
        &config,
        store.clone(),
        writer.clone(),
        wake.clone(),
        shutdown.clone(),
    )?
    .with_alerts(alerts.clone());
    let header_timeout = config.server.header_timeout;
    let max_connections = config.server.max_connections;
    let mut tasks: Vec<(&str, JoinHandle<()>)> = Vec::new();
    if let Some(tls) = tls {
        tasks.push(("the TLS certificate task", tls.spawn(shutdown.clone())));
    }
    if let Some(a) = alert_task {
        // Not supervised: a failed alert task must not stop ingest.
        let run = a
            .run(shutdown.clone())
            .instrument(tracing::info_span!("alerts"));
        tasks.push(("the alert task", tokio::spawn(run)));
    }
    if let Some(r) = refresher {
        let run = r.run(shutdown.clone());
        let run = run.instrument(tracing::info_span!("ip_sets"));
        tasks.push(("the IP set refresh task", supervise(&shutdown, run)));
    }
    for task in maintenance::spawn(&config, store.clone(), writer.clone(), shutdown.clone()) {
        tasks.push(("a maintenance task", task));
    }
    let catchup_run = catchup.clone().run(shutdown.clone());
    tasks.push(("the catch-up task", supervise(&shutdown, catchup_run)));
    let pull = Arc::new(
        PullHub::new(
            &config,
            store.clone(),
            writer.clone(),
            edge.clone(),
            board.clone(),
            shutdown.clone(),
        )
        .with_alerts(alarm),
    );
    let woken = {
        let (dispatcher, pull) = (wake.clone(), pull.clone());
        move || {
            dispatcher.notify_one();
            pull.wake_all();
        }
    };
    let watch = board::watch(board.clone(), store.clone(), woken, shutdown.clone());
    tasks.push(("the pause watcher", supervise(&shutdown, watch)));
    let public_router = public_router(
        &config,
        writer.clone(),
        wake.clone(),
        pull.clone(),
        &metrics,
        edge,
        alerts,
    );
    let watchdog = notify::watchdog(writer.clone(), shutdown.clone());
    tasks.push(("the watchdog task", supervise(&shutdown, watchdog)));
    let admin_state = AdminState {
        config: Arc::new(config.clone()),
        store: store.clone(),
        writer: writer.clone(),
        dispatch: wake,
        pull: pull.clone(),
        board,
        metrics,
        catchup,
    };
    let admin_router = admin::router(admin_state, &admin_token)
        .merge(admin::behind_token(
            crate::delivery::pull::admin_routes(pull),
            &admin_token,
        ))
        .merge(health_routes(writer));
    if let Some(d) = dispatcher {
        let run = d.run(shutdown.clone());
        tasks.push(("the dispatcher task", supervise(&shutdown, run)));
    }
    let listen = |listener, router, tls| {
        // A listener stops only at shutdown; if one ends otherwise (a
        // panic), the whole server stops rather than serve half.
        let stop_all = shutdown.clone().drop_guard();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            server::serve(
                listener,
                router,
                tls,
                header_timeout,
                max_connections,
                shutdown,
            )
            .await;
            drop(stop_all);
        })
    };
    // Listeners first: awaiting them is what waits for shutdown.
    tasks.insert(0, ("the admin listener", listen(admin, admin_router, None)));
    tasks.insert(
        0,
        (
            "the public listener",
            listen(public, public_router, acceptor),
        ),
    );
    let stopping = shutdown.clone();
    tokio::spawn(async move {
        stopping.cancelled().await;
        notify::stopping();
    });
    notify::ready();
    let mut failed = None;
    for (what, task) in tasks {
        if let Err(e) = task.await {
            // Stop the rest, so awaiting them ends.
            shutdown.cancel();
            let e = anyhow::Error::new(e).context(format!("{what} failed"));
            tracing::error!(error = %format!("{e:#}"), "stopping hookbox");
            failed.get_or_insert(e);
        }
    }
    failed.map_or(Ok(()), Err)
}

/// One line per destination gone from the config whose deliveries wait:
/// they are kept and never dispatched, which an operator who edited the
/// config and restarted would otherwise learn only from `hookbox check`.
async fn warn_orphans(config: &Config, store: &Store) {
    let pending = match store.read(store::queries::pending_per_lane).await {
        Ok(pending) => pending,
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "cannot count the deliveries waiting per destination");
            return;
        }
    };
    for (source, destination, count) in store::orphans::waiting(config, &pending) {
        tracing::warn!(
            source = %source,
            destination = %destination,
            pending = count,
            "deliveries wait at a destination that is not in the config; they are kept and not dispatched"
        );
    }
}

/// Spawns `task`; if it ends other than by returning (a panic), `shutdown`
/// is cancelled so that the rest of the server stops too.
fn supervise(
    shutdown: &CancellationToken,
    task: impl Future<Output = ()> + Send + 'static,
) -> JoinHandle<()> {
    let stop_all = shutdown.clone().drop_guard();
    tokio::spawn(async move {
        task.await;
        stop_all.disarm();
    })
}

/// The public listener: the receiver, the pull API and the health checks,
/// nothing else.
fn public_router(
    config: &Config,
    writer: WriterHandle,
    dispatch: Arc<Notify>,
    pull: Arc<PullHub>,
    metrics: &Metrics,
    edge: Arc<Edge>,
    alerts: Alerter,
) -> Router {
    let receiver = Receiver::new(
        config,
        writer.clone(),
        dispatch,
        pull.clone(),
        metrics,
        edge,
    )
    .with_alerts(alerts);
    Router::new()
        .route(
            "/hooks/{source}",
            post(crate::ingress::receive::receive).get(crate::ingress::receive::handshake),
        )
        .with_state(receiver)
        .merge(crate::delivery::pull::public_routes(pull))
        .merge(health_routes(writer))
}

fn health_routes(writer: WriterHandle) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .with_state(writer)
}
