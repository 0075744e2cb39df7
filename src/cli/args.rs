//! The command line as clap reads it: every verb, flag and help text.
//!
//! Kept apart from the verbs because the doc comments here are the help
//! text, and `dist/man` and `dist/completions` are generated from them
//! (`dist/refresh.sh`; `tests/it/manual.rs` compares): a change here is a
//! change to shipped files, so it should be on purpose. They are written
//! for a terminal, not for rustdoc: `[[alerts]]` is the config's table
//! and a URL is an example to type, not a link.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::bare_urls)]

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Parser, Subcommand};

use crate::store::models::State;
use crate::telemetry::LogFormat;

#[derive(Parser)]
#[command(
    name = "hookbox",
    // build.rs records the commit; "unknown commit" outside a git checkout.
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("HOOKBOX_GIT_COMMIT"), ")"),
    about = "A self-hosted webhook inbox on one SQLite file"
)]
pub struct Cli {
    /// Config file. Without it: /etc/hookbox/hookbox.toml if present, else
    /// the embedded default.
    #[arg(long, global = true, env = "HOOKBOX_CONFIG")]
    pub config: Option<PathBuf>,
    /// Log format.
    #[arg(long, global = true, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Receive webhooks until SIGTERM or SIGINT.
    Serve,
    /// Validate the config and print it with secrets redacted.
    Check,
    /// Exit 0 when the running server is ready (GET /readyz on the admin
    /// listener): the container health check.
    Healthcheck,
    /// Put deliveries back to pending with their attempts reset (never a
    /// new event row). Works whether or not the server is running; a
    /// running server picks them up within seconds. Three forms: `replay
    /// ID [--destination D]`; `replay --dead [--source S] [--destination D]
    /// [--since T] [--until T]`; and `replay --source S --destination D
    /// [--since T] [--until T]`, which replays the destination's dead and
    /// delivered deliveries and also gives it every event in the range
    /// that its filter takes and that it never had (a new destination
    /// getting old events).
    #[command(group = clap::ArgGroup::new("which").required(true).multiple(true))]
    Replay(ReplayArgs),
    /// Write a consistent, checked copy of the database to DEST (a new
    /// file, mode 0600). Safe while the server runs and writes.
    Backup {
        /// Where the copy goes; its directory must exist.
        dest: PathBuf,
        /// Replace DEST if it exists.
        #[arg(long)]
        force: bool,
    },
    /// List events, newest first. Reads the database read-only, so it works
    /// whether or not the server runs.
    Events(EventsArgs),
    /// Delete dead events for good: those whose last attempt is older than
    /// --older-than (e.g. 30d).
    Purge {
        /// Purge dead events (the only kind purge removes).
        #[arg(long, required = true)]
        dead: bool,
        /// How long an event must have been dead, e.g. "30d", "12h".
        #[arg(long, value_parser = humantime::parse_duration)]
        older_than: Duration,
        /// Only events of this source.
        #[arg(long)]
        source: Option<String>,
    },
    /// Pause or resume a destination by hand (planned maintenance): while
    /// paused it keeps receiving into its queue and nothing is attempted;
    /// on resume its backlog is due at once. Works whether or not the
    /// server is running; a running server sees it within 2 s. `list`
    /// shows every destination's pauses.
    #[command(subcommand)]
    Destination(DestinationCommand),
    /// Run DESTINATION's filter and transform over events of SOURCE
    /// already stored, sending nothing, and print for each whether it
    /// matches and exactly what would be sent (secrets redacted). With
    /// --config, a destination not running yet is tried against the
    /// database that config names. Reads the database read-only.
    Try(TryArgs),
    /// Take events from a pull destination of a (remote) hookbox and POST
    /// each to a local URL: ack on 2xx, nack otherwise. Nothing sent while
    /// this was not running is lost: it is taken when it runs again.
    Listen(Box<ListenArgs>),
    /// Run one catch-up pass of SOURCE now (GitHub redelivery, GitLab
    /// resend, Paddle replay, Stripe or Square backfill) and print what it
    /// found and asked for. Waits for a pass the server is running to
    /// finish first. With --report, runs nothing and prints the source's
    /// completeness ledger instead (exit 1 when something is missing).
    CatchUp {
        source: String,
        /// Ask for nothing and insert nothing; only show what would be done.
        #[arg(long, conflicts_with = "report")]
        dry_run: bool,
        /// Print the completeness ledger of the passes of the last --window.
        #[arg(long)]
        report: bool,
        /// How far back --report sums the passes (72h, 7d).
        #[arg(long, default_value = "72h", value_parser = humantime::parse_duration, requires = "report")]
        window: std::time::Duration,
    },
    /// Alerts ([[alerts]] in the config).
    #[command(subcommand)]
    Alerts(AlertsCommand),
    /// Print the man page hookbox.1, generated from these definitions; or,
    /// with --out-dir, write it and one page per command (hookbox-serve.1,
    /// ...) there.
    Man {
        /// Write every page into this directory instead of printing one.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
    /// Print the tab-completion script for SHELL, e.g. `hookbox completions
    /// bash > /etc/bash_completion.d/hookbox`.
    Completions {
        #[arg(value_enum)]
        shell: crate::cli::manual::pages::Shell,
    },
}

#[derive(clap::Subcommand)]
pub enum AlertsCommand {
    /// Send one test message to each [[alerts]] receiver and say, per
    /// alert, whether it arrived; exit 1 if any did not.
    Test,
}

#[derive(clap::Subcommand)]
pub enum DestinationCommand {
    /// Pause SOURCE's destination NAME until resumed.
    Pause { source: String, name: String },
    /// Resume SOURCE's destination NAME.
    Resume { source: String, name: String },
    /// Every paused destination, by hand or by its circuit breaker.
    List,
}

/// `hookbox listen`'s flags.
#[derive(clap::Args)]
pub struct ListenArgs {
    /// The hookbox to pull from, e.g. https://hooks.example.com.
    #[arg(long)]
    pub url: reqwest::Url,
    #[arg(long)]
    pub source: String,
    /// The pull destination's name.
    #[arg(long)]
    pub destination: String,
    /// The destination's pull token: env:NAME, file:PATH or the token
    /// itself (visible to other users in the process list; prefer env:).
    #[arg(long, env = "HOOKBOX_PULL_TOKEN", hide_env_values = true)]
    pub token: String,
    /// Where each event is POSTed, e.g. http://127.0.0.1:3000/webhooks.
    #[arg(long)]
    pub forward_to: reqwest::Url,
    /// Forward what is due now, then exit.
    #[arg(long)]
    pub once: bool,
    /// Events per take (1-100).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub max: u16,
    /// A PEM CA certificate to trust besides the system's.
    #[arg(long)]
    pub ca: Option<PathBuf>,
}

/// `hookbox replay`'s arguments: an ID excludes `--dead`, `--source`,
/// `--since` and `--until`.
#[derive(clap::Args)]
pub struct ReplayArgs {
    /// The event id (as in the 202 answer).
    #[arg(group = "which", conflicts_with_all = ["dead", "skipped", "source", "since", "until"])]
    pub id: Option<i64>,
    /// Every dead delivery (of --source, at --destination, if given).
    #[arg(long, group = "which")]
    pub dead: bool,
    /// Every skipped delivery (a transform gave no output; fix it, then
    /// replay them to run it again), of --source, at --destination.
    #[arg(long, conflicts_with = "dead")]
    pub skipped: bool,
    /// Only events of this source.
    #[arg(long)]
    pub source: Option<String>,
    /// Only deliveries at this destination. With an ID, its delivery
    /// there, created if the event never had one.
    #[arg(long, group = "which")]
    pub destination: Option<String>,
    /// Only events received at or after this time: RFC 3339, a date
    /// (2026-11-01, UTC) or unix milliseconds.
    #[arg(long, value_parser = parse_time)]
    pub since: Option<i64>,
    /// Only events received before this time (as --since).
    #[arg(long, value_parser = parse_time)]
    pub until: Option<i64>,
}

/// `hookbox try`'s arguments.
#[derive(clap::Args)]
#[command(group = clap::ArgGroup::new("which").multiple(false))]
pub struct TryArgs {
    pub source: String,
    pub destination: String,
    /// This event (its id, as `hookbox events` lists it).
    #[arg(long, group = "which")]
    pub event: Option<i64>,
    /// The newest N events of SOURCE (the default: 10).
    #[arg(long, group = "which")]
    pub last: Option<usize>,
    /// Events received since this time (RFC 3339, a date, or unix ms),
    /// at most 1000, newest first.
    #[arg(long, group = "which", value_parser = parse_time)]
    pub since: Option<i64>,
    /// One JSON object per event instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `hookbox events`' flags.
#[derive(clap::Args)]
pub struct EventsArgs {
    #[arg(long)]
    pub source: Option<String>,
    /// Only events with a delivery at this destination; STATE,
    /// ATTEMPTS and LAST ERROR are then that delivery's, and --state
    /// filters on it.
    #[arg(long)]
    pub destination: Option<String>,
    #[arg(long, value_parser = state_parser())]
    pub state: Option<State>,
    #[arg(long)]
    pub event_type: Option<String>,
    /// Only events whose body has all these words; `word*` matches a
    /// prefix (needs `[search] enabled`, the default).
    #[arg(long)]
    pub q: Option<String>,
    /// Most events to list.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
}

impl Command {
    /// Commands that only read or copy the database need no secrets.
    pub fn needs_secrets(&self) -> bool {
        matches!(
            self,
            Command::Serve | Command::Check | Command::CatchUp { .. } | Command::Alerts(_)
        )
    }
}

/// `--state`: the store's own [`State`], offered under the names the
/// database and the API use, so the CLI keeps no copy of the list.
fn state_parser() -> impl TypedValueParser<Value = State> {
    PossibleValuesParser::new(State::ALL.map(State::as_str))
        .try_map(|name| State::parse(&name).ok_or("not a state"))
}

/// A time on the command line: RFC 3339, a bare date (midnight UTC), or
/// unix milliseconds.
fn parse_time(value: &str) -> Result<i64, String> {
    crate::support::clock::parse_time(value).ok_or_else(|| {
        "expected an RFC 3339 time (2026-11-01T12:00:00Z), a date (2026-11-01) or unix milliseconds"
            .to_owned()
    })
}
