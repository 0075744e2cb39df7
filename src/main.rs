//! The `hookbox` command: a thin shell over the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use hookbox::app::App;
use hookbox::config::{self, Config};
use hookbox::store::dispatch::{self, ReplayFilter};
use hookbox::telemetry::{self, LogFormat};

#[derive(Parser)]
#[command(
    name = "hookbox",
    version,
    about = "A self-hosted webhook inbox on one SQLite file"
)]
struct Cli {
    /// Config file. Without it: /etc/hookbox/hookbox.toml if present, else
    /// the embedded default.
    #[arg(long, global = true, env = "HOOKBOX_CONFIG")]
    config: Option<PathBuf>,
    /// Log format.
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Receive webhooks until SIGTERM or SIGINT.
    Serve,
    /// Validate the config and print it with secrets redacted.
    Check,
    /// Put events back to pending with their attempts reset (never a new
    /// row). Works whether or not the server is running; a running server
    /// picks them up within seconds.
    #[command(group = clap::ArgGroup::new("which").required(true))]
    Replay {
        /// The event id (as in the 202 answer).
        #[arg(group = "which")]
        id: Option<i64>,
        /// Every dead event (of --source, if given).
        #[arg(long, group = "which")]
        dead: bool,
        /// Only events of this source (with --dead).
        #[arg(long, requires = "dead")]
        source: Option<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    telemetry::init(cli.log_format);
    let config = match config::load(cli.config.as_deref()) {
        Ok(config) => config,
        Err(e) => {
            eprint!("{e}");
            return ExitCode::from(2);
        }
    };
    match cli.command {
        Command::Check => {
            println!("# hookbox configuration from {} (valid)", config.origin);
            print!("{}", config.redacted_toml());
            ExitCode::SUCCESS
        }
        Command::Replay {
            id,
            dead: _,
            source,
        } => match replay(&config, id, source) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("hookbox replay: {e:#}");
                ExitCode::FAILURE
            }
        },
        Command::Serve => match serve(config) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(error = format!("{e:#}"), "hookbox stopped on an error");
                ExitCode::FAILURE
            }
        },
    }
}

fn serve(config: Config) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("hookbox")
        .build()?;
    runtime.block_on(async {
        log_sources(&config);
        let app = App::build(config).await?;
        tracing::info!(
            public = %app.public_addr(),
            admin = %app.admin_addr(),
            database = %app.store().path().display(),
            "ready"
        );
        let shutdown = CancellationToken::new();
        hookbox::shutdown::cancel_on_signal(shutdown.clone())?;
        app.run(shutdown).await
    })
}

fn replay(config: &Config, id: Option<i64>, source: Option<String>) -> anyhow::Result<()> {
    let conn = hookbox::store::open_for_cli(&config.server.database)?;
    let filter = match id {
        Some(id) => {
            let source = dispatch::event_source(&conn, id)?
                .ok_or_else(|| anyhow::anyhow!("no event {id}"))?;
            anyhow::ensure!(
                config.source(&source).is_some_and(|s| s.deliver.is_some()),
                "event {id} belongs to source {source:?}, which has no destination in this config"
            );
            ReplayFilter {
                id: Some(id),
                ..ReplayFilter::default()
            }
        }
        None => ReplayFilter {
            source,
            state: Some("dead".to_owned()),
            ..ReplayFilter::default()
        },
    };
    let n = dispatch::replay(&conn, &filter, hookbox::clock::now_ms())?;
    println!("{n} event(s) put back to pending");
    Ok(())
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
