//! Wiring: the store, the writer, the routers and both listeners.
//!
//! [`App::build`] does everything that can fail at start-up (open the
//! database, bind the ports) and returns before serving, so callers (the
//! CLI, the tests) learn the bound addresses. [`App::run`] serves until the
//! token is cancelled, then shuts down in order: stop accepting, let
//! requests in flight finish, let running deliveries finish (or release
//! them), stop the maintenance jobs (retention, snapshots: see
//! [`crate::maintenance`]), drop every writer handle, and wait for the writer to commit what
//! is queued and checkpoint.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::activation::{self, Inherited};
use crate::admin::{self, AdminState};
use crate::catchup::CatchupHandle;
use crate::config::{Config, Secret};
use crate::dispatch::worker::Dispatcher;
use crate::edge::Edge;
use crate::edge::sets::Refresher;
use crate::metrics::Metrics;
use crate::receive::Receiver;
use crate::store::{self, Store, WriterHandle, WriterThread};
use crate::tls::Manager as TlsManager;
use crate::{health, maintenance, notify, server};

/// How long the writer gets to finish after the listeners have stopped.
const WRITER_STOP_TIMEOUT: Duration = Duration::from_secs(10);

pub struct App {
    config: Config,
    store: Store,
    writer: WriterHandle,
    writer_thread: WriterThread,
    public: TcpListener,
    admin: TcpListener,
    /// The bearer token the admin listener requires.
    admin_token: Secret,
    metrics: Arc<Metrics>,
    edge: Arc<Edge>,
    /// Refreshes the named IP sets; `None` when no source uses one.
    refresher: Option<Refresher>,
    /// Holds and reloads the public listener's certificate; `None`: plain HTTP.
    tls: Option<TlsManager>,
}

impl App {
    /// Opens the database and binds both listeners.
    pub async fn build(config: Config) -> anyhow::Result<App> {
        App::build_with(config, Inherited::default()).await
    }

    /// [`App::build`], with sockets systemd passed in place of binding.
    pub async fn build_with(config: Config, inherited: Inherited) -> anyhow::Result<App> {
        let (store, writer, writer_thread) = store::open(
            &config.server.database,
            config.server.durability,
            config.server.writer_queue,
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
            config,
            store,
            writer,
            writer_thread,
            public,
            admin,
            admin_token,
            metrics,
            edge,
            refresher,
            tls,
        })
    }

    pub fn public_addr(&self) -> SocketAddr {
        self.public
            .local_addr()
            .expect("a bound listener has an address")
    }

    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
            .local_addr()
            .expect("a bound listener has an address")
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Serves until `shutdown` is cancelled, then stops in order.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let App {
            config,
            store,
            writer,
            writer_thread,
            public,
            admin,
            admin_token,
            metrics,
            edge,
            refresher,
            tls,
        } = self;
        let acceptor = tls.as_ref().map(TlsManager::acceptor).transpose()?;
        let tls_task = tls.map(|t| t.spawn(shutdown.clone()));
        let header_timeout = config.server.header_timeout;
        let max_connections = config.server.max_connections;
        let refresh_task = refresher.map(|r| {
            tokio::spawn(
                r.run(shutdown.clone())
                    .instrument(tracing::info_span!("ip_sets")),
            )
        });
        let wake = Arc::new(Notify::new());
        let dispatcher = Dispatcher::new(
            &config,
            store.clone(),
            writer.clone(),
            wake.clone(),
            &metrics,
        )?;
        let upkeep = maintenance::spawn(&config, store.clone(), writer.clone(), shutdown.clone());
        // The admin API may keep a clone of `catchup` to run a pass on demand.
        let catchup = CatchupHandle::new(
            &config,
            store.clone(),
            writer.clone(),
            wake.clone(),
            shutdown.clone(),
        )?;
        let catchup_task = tokio::spawn(catchup.clone().run(shutdown.clone()));
        let public_router = public_router(&config, writer.clone(), wake.clone(), &metrics, edge);
        let watchdog = tokio::spawn(notify::watchdog(writer.clone(), shutdown.clone()));
        let admin_state = AdminState {
            config: Arc::new(config.clone()),
            store: store.clone(),
            writer: writer.clone(),
            dispatch: wake,
            metrics,
            catchup,
        };
        let admin_router = admin::router(admin_state, &admin_token).merge(health_routes(writer));
        let dispatch_task = dispatcher.map(|d| tokio::spawn(d.run(shutdown.clone())));
        let serve = |listener, router, tls| {
            tokio::spawn(server::serve(
                listener,
                router,
                tls,
                header_timeout,
                max_connections,
                shutdown.clone(),
            ))
        };
        let stopping = shutdown.clone();
        tokio::spawn(async move {
            stopping.cancelled().await;
            notify::stopping();
        });
        notify::ready();
        let (p, a) = tokio::join!(
            serve(public, public_router, acceptor),
            serve(admin, admin_router, None)
        );
        p.context("the public listener task failed")?;
        a.context("the admin listener task failed")?;
        if let Some(task) = dispatch_task {
            task.await.context("the dispatcher task failed")?;
        }
        catchup_task.await.context("the catch-up task failed")?;
        if let Some(task) = refresh_task {
            task.await.context("the IP set refresh task failed")?;
        }
        for task in upkeep {
            task.await.context("a maintenance task failed")?;
        }
        watchdog.await.context("the watchdog task failed")?;
        if let Some(task) = tls_task {
            task.await.context("the TLS certificate task failed")?;
        }
        // Every writer handle lived in the routers and the dispatcher, which
        // are gone: the writer now drains its queue and stops.
        let joined = tokio::task::spawn_blocking(move || writer_thread.join());
        match tokio::time::timeout(WRITER_STOP_TIMEOUT, joined).await {
            Ok(_) => tracing::info!("stopped"),
            Err(_) => tracing::error!("the writer did not stop within {WRITER_STOP_TIMEOUT:?}"),
        }
        Ok(())
    }
}

/// The public listener: the receiver and the health checks, nothing else.
fn public_router(
    config: &Config,
    writer: WriterHandle,
    dispatch: Arc<Notify>,
    metrics: &Metrics,
    edge: Arc<Edge>,
) -> Router {
    let receiver = Receiver::new(config, writer.clone(), dispatch, metrics, edge);
    Router::new()
        .route("/hooks/{source}", post(crate::receive::receive))
        .with_state(receiver)
        .merge(health_routes(writer))
}

fn health_routes(writer: WriterHandle) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .with_state(writer)
}
