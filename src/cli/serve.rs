//! `hookbox serve`: builds the app and runs it until SIGTERM or SIGINT.
//! The verb only owns the runtime and the start-up log lines; `app` owns
//! everything that runs.

use std::process::ExitCode;

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::service::app::App;

/// Exit 1 after logging the error that stopped the server.
pub fn run(config: Config) -> ExitCode {
    match serve(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "hookbox stopped on an error");
            ExitCode::FAILURE
        }
    }
}

fn serve(config: Config) -> anyhow::Result<()> {
    // Before the runtime's threads exist: it edits the environment.
    let inherited = crate::ingress::activation::Inherited::from_env()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("hookbox")
        .build()?;
    runtime.block_on(async {
        log_sources(&config);
        let app = App::build_with(config, inherited).await?;
        tracing::info!(
            public = %app.public_addr(),
            admin = %app.admin_addr(),
            database = %app.store().path().display(),
            "ready"
        );
        let shutdown = CancellationToken::new();
        crate::service::shutdown::cancel_on_signal(shutdown.clone())?;
        app.run(shutdown).await
    })
}

fn log_sources(config: &Config) {
    let enabled: Vec<String> = config
        .sources
        .iter()
        .map(|s| format!("{} ({})", s.name, s.kind.as_str()))
        .collect();
    tracing::info!(config = %config.origin, "sources enabled: {}", list_or_none(&enabled));
    if !config.disabled_defaults.is_empty() {
        let off: Vec<String> = config
            .disabled_defaults
            .iter()
            .map(|(name, var)| format!("{name} (set {var})"))
            .collect();
        tracing::info!("sources off, answering 404: {}", off.join(", "));
    }
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(", ")
    }
}
