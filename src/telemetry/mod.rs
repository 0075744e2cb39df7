//! What hookbox tells its operator about itself: log lines on stderr, and
//! the Prometheus [`metrics`] every part updates and the admin listener
//! serves.
//!
//! Logging is human-readable by default, JSON on request. The default filter is `hookbox=info`; `RUST_LOG` overrides it. Colours
//! only on a terminal, so journald and `docker logs` get plain text. Nothing
//! in hookbox logs a secret, a signature or a body; see `config::Secret`.

pub mod metrics;

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("hookbox=info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second init (tests) keeps the first subscriber; that is fine.
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
