//! The `hookbox` command: a thin shell over the library.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{CommandFactory as _, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use hookbox::app::App;
use hookbox::config::{self, Config};
use hookbox::dispatch::replay as plan;
use hookbox::store::listing::{self, ListFilter};
use hookbox::store::replay as replay_sql;
use hookbox::store::search::SearchQuery;
use hookbox::store::{backup, queries, retention};
use hookbox::telemetry::{self, LogFormat};

#[derive(Parser)]
#[command(
    name = "hookbox",
    // build.rs records the commit; "unknown commit" outside a git checkout.
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("HOOKBOX_GIT_COMMIT"), ")"),
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
    Replay {
        /// The event id (as in the 202 answer).
        #[arg(group = "which", conflicts_with_all = ["dead", "source", "since", "until"])]
        id: Option<i64>,
        /// Every dead delivery (of --source, at --destination, if given).
        #[arg(long, group = "which")]
        dead: bool,
        /// Only events of this source.
        #[arg(long)]
        source: Option<String>,
        /// Only deliveries at this destination. With an ID, its delivery
        /// there, created if the event never had one.
        #[arg(long, group = "which")]
        destination: Option<String>,
        /// Only events received at or after this time: RFC 3339, a date
        /// (2026-11-01, UTC) or unix milliseconds.
        #[arg(long, value_parser = parse_time)]
        since: Option<i64>,
        /// Only events received before this time (as --since).
        #[arg(long, value_parser = parse_time)]
        until: Option<i64>,
    },
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
    Events {
        #[arg(long)]
        source: Option<String>,
        /// Only events with a delivery at this destination; STATE,
        /// ATTEMPTS and LAST ERROR are then that delivery's, and --state
        /// filters on it.
        #[arg(long)]
        destination: Option<String>,
        #[arg(long, value_enum)]
        state: Option<StateArg>,
        #[arg(long)]
        event_type: Option<String>,
        /// Only events whose body has all these words; `word*` matches a
        /// prefix (needs `[search] enabled`, the default).
        #[arg(long)]
        q: Option<String>,
        /// Most events to list.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
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
    /// Take events from a pull destination of a (remote) hookbox and POST
    /// each to a local URL: ack on 2xx, nack otherwise. Nothing sent while
    /// this was not running is lost: it is taken when it runs again.
    Listen(Box<ListenArgs>),
    /// Run one catch-up pass of SOURCE now (GitHub redelivery, GitLab
    /// resend or Stripe backfill) and print what it found and asked for.
    /// Waits for a pass the server is running to finish first.
    CatchUp {
        source: String,
        /// Ask for nothing and insert nothing; only show what would be done.
        #[arg(long)]
        dry_run: bool,
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
        shell: hookbox::manual::Shell,
    },
}

#[derive(clap::Subcommand)]
enum AlertsCommand {
    /// Send one test message to each [[alerts]] receiver and say, per
    /// alert, whether it arrived; exit 1 if any did not.
    Test,
}

#[derive(clap::Subcommand)]
enum DestinationCommand {
    /// Pause SOURCE's destination NAME until resumed.
    Pause { source: String, name: String },
    /// Resume SOURCE's destination NAME.
    Resume { source: String, name: String },
    /// Every paused destination, by hand or by its circuit breaker.
    List,
}

/// `hookbox listen`'s flags.
#[derive(clap::Args)]
struct ListenArgs {
    /// The hookbox to pull from, e.g. https://hooks.example.com.
    #[arg(long)]
    url: reqwest::Url,
    #[arg(long)]
    source: String,
    /// The pull destination's name.
    #[arg(long)]
    destination: String,
    /// The destination's pull token: env:NAME, file:PATH or the token
    /// itself (visible to other users in the process list; prefer env:).
    #[arg(long, env = "HOOKBOX_PULL_TOKEN", hide_env_values = true)]
    token: String,
    /// Where each event is POSTed, e.g. http://127.0.0.1:3000/webhooks.
    #[arg(long)]
    forward_to: reqwest::Url,
    /// Forward what is due now, then exit.
    #[arg(long)]
    once: bool,
    /// Events per take (1-100).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..=100))]
    max: u16,
    /// A PEM CA certificate to trust besides the system's.
    #[arg(long)]
    ca: Option<PathBuf>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum StateArg {
    Pending,
    Delivered,
    Dead,
    Stored,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    telemetry::init(cli.log_format);
    // A client of another hookbox: no config, no database.
    if let Command::Listen(args) = cli.command {
        return listen(*args);
    }
    // Documentation of the CLI itself: no config either.
    if let Command::Man { out_dir } = &cli.command {
        return report("man", man(out_dir.as_deref()));
    }
    if let Command::Completions { shell } = cli.command {
        return completions(shell);
    }
    // Commands that only read or copy the database need no secrets.
    let needs_secrets = matches!(
        cli.command,
        Command::Serve | Command::Check | Command::CatchUp { .. } | Command::Alerts(_)
    );
    let loaded = if needs_secrets {
        config::load(cli.config.as_deref())
    } else {
        config::load_without_secrets(cli.config.as_deref())
    };
    let config = match loaded {
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
            for warning in orphan_warnings(&config) {
                eprintln!("warning: {warning}");
            }
            ExitCode::SUCCESS
        }
        Command::Replay {
            id,
            dead,
            source,
            destination,
            since,
            until,
        } => {
            let which = match id {
                Some(id) => Ok(Replay::Event { id, destination }),
                None if !dead && (source.is_none() || destination.is_none()) => {
                    Err(anyhow::anyhow!(
                        "without --dead, name the event (ID) or both --source and --destination"
                    ))
                }
                None => Ok(Replay::Bulk(plan::Bulk {
                    state: dead.then(|| "dead".to_owned()),
                    source,
                    destination,
                    since,
                    until,
                })),
            };
            report("replay", which.and_then(|which| replay(&config, which)))
        }
        Command::Healthcheck => match healthcheck(&config) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("hookbox healthcheck: {e:#}");
                ExitCode::FAILURE
            }
        },
        Command::Backup { dest, force } => report("backup", backup(&config, &dest, force)),
        Command::Events {
            source,
            destination,
            state,
            event_type,
            q,
            limit,
            json,
        } => {
            if destination.is_some() && matches!(state, Some(StateArg::Stored)) {
                eprintln!(
                    "hookbox events: a delivery is never stored (that is an event without any); \
                     leave out --destination to list stored events"
                );
                return ExitCode::from(2);
            }
            let q = match q.map(|q| search_query(&config, &q)).transpose() {
                Ok(q) => q,
                Err(reason) => {
                    eprintln!("hookbox events: --{reason}");
                    return ExitCode::from(2);
                }
            };
            let filter = ListFilter {
                source,
                destination,
                state: state.map(|s| state_name(s).to_owned()),
                event_type,
                q,
                limit,
            };
            report("events", events(&config, &filter, json))
        }
        Command::Purge {
            dead: _,
            older_than,
            source,
        } => report("purge", purge(&config, older_than, source.as_deref())),
        Command::CatchUp { source, dry_run } => catch_up(&config, &source, dry_run),
        Command::Destination(cmd) => report("destination", destination(&config, cmd)),
        Command::Alerts(AlertsCommand::Test) => alerts_test(&config),
        Command::Listen(args) => listen(*args),
        Command::Man { out_dir } => report("man", man(out_dir.as_deref())),
        Command::Completions { shell } => completions(shell),
        Command::Serve => match serve(config) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(error = format!("{e:#}"), "hookbox stopped on an error");
                ExitCode::FAILURE
            }
        },
    }
}

fn man(out_dir: Option<&Path>) -> anyhow::Result<()> {
    match out_dir {
        None => hookbox::manual::write_main_page(Cli::command(), &mut std::io::stdout().lock()),
        Some(dir) => {
            for path in hookbox::manual::write_pages(Cli::command(), dir)? {
                println!("wrote {}", path.display());
            }
            Ok(())
        }
    }
}

fn completions(shell: hookbox::manual::Shell) -> ExitCode {
    let out = &mut std::io::stdout().lock();
    report(
        "completions",
        hookbox::manual::write_completions(Cli::command(), shell, out),
    )
}

fn listen(args: ListenArgs) -> ExitCode {
    let ListenArgs {
        url,
        source,
        destination,
        token,
        forward_to,
        once,
        max,
        ca,
    } = args;
    let token = match config::resolve_secret(&token) {
        Ok(token) => token,
        Err(why) => {
            eprintln!("hookbox listen: --token: {why}");
            return ExitCode::from(2);
        }
    };
    let listen = hookbox::listen::Listen {
        url,
        source,
        destination,
        token,
        forward_to,
        once,
        max: usize::from(max),
        wait: Duration::from_secs(20),
        ca,
    };
    let ran = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")
        .and_then(|runtime| {
            runtime.block_on(async {
                let stop = CancellationToken::new();
                hookbox::shutdown::cancel_on_signal(stop.clone())?;
                hookbox::listen::run(listen, stop).await
            })
        });
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hookbox listen: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve(config: Config) -> anyhow::Result<()> {
    // Before the runtime's threads exist: it edits the environment.
    let inherited = hookbox::activation::Inherited::from_env()?;
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
        hookbox::shutdown::cancel_on_signal(shutdown.clone())?;
        app.run(shutdown).await
    })
}

/// What `hookbox replay` was asked for.
enum Replay {
    Event {
        id: i64,
        destination: Option<String>,
    },
    Bulk(plan::Bulk),
}

fn replay(config: &Config, which: Replay) -> anyhow::Result<()> {
    let mut conn = hookbox::store::open_for_cli(&config.server.database)?;
    let filters = match &which {
        Replay::Event { id, destination } => {
            let event = queries::event_state(&conn, *id)?
                .ok_or_else(|| anyhow::anyhow!("no event {id}"))?;
            plan::event(config, &event, *id, destination.as_deref())?
        }
        Replay::Bulk(bulk) => plan::bulk(config, bulk)?,
    };
    // One transaction: the reset, the deliveries created and the
    // re-holding of what is now behind a replayed one go together.
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .context("starting the replay")?;
    let now = hookbox::clock::now_ms();
    let mut n = 0;
    for filter in &filters {
        n += replay_sql(&tx, filter, now)?;
    }
    tx.commit().context("committing the replay")?;
    match n {
        1 => println!("1 delivery put back to pending or created"),
        n => println!("{n} deliveries put back to pending or created"),
    }
    Ok(())
}

/// A time on the command line: RFC 3339, a bare date (midnight UTC), or
/// unix milliseconds.
fn parse_time(value: &str) -> Result<i64, String> {
    hookbox::clock::parse_time(value).ok_or_else(|| {
        "expected an RFC 3339 time (2026-11-01T12:00:00Z), a date (2026-11-01) or unix milliseconds"
            .to_owned()
    })
}

/// Destinations gone from the config whose deliveries the database still
/// holds. Only a look: nothing at all when there is no database yet or it
/// cannot be read (another schema version, no permission), as the config
/// itself is what `check` checks.
fn orphan_warnings(config: &Config) -> Vec<String> {
    let path = &config.server.database;
    if !path.exists() {
        return Vec::new();
    }
    hookbox::store::open_read_only(path)
        .and_then(|conn| queries::lane_counts(&conn))
        .map(|lanes| hookbox::store::orphans::warnings(config, &lanes))
        .unwrap_or_default()
}

/// A bare HTTP/1.0 `GET /readyz` to the admin listener: no client library
/// for one request, and nothing in a minimal image to run one.
fn healthcheck(config: &Config) -> anyhow::Result<()> {
    use std::io::{Read, Write};
    use std::time::Duration;
    let mut addr = config.server.admin_listen;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let timeout = Duration::from_secs(3);
    let mut stream = std::net::TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| anyhow::anyhow!("cannot connect to {addr}: {e}"))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.write_all(b"GET /readyz HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut answer = String::new();
    stream.take(4096).read_to_string(&mut answer)?;
    let status = answer.lines().next().unwrap_or_default();
    anyhow::ensure!(
        status.split(' ').nth(1) == Some("200"),
        "{addr} answered {status:?}"
    );
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

/// How long `catch-up` waits for a pass the server is running.
const CATCH_UP_WAIT: Duration = Duration::from_secs(120);

/// Exit 0 when the pass read its whole window and every request went
/// through (or was refused for good); 1 otherwise, with the report printed
/// either way.
fn catch_up(config: &Config, source: &str, dry_run: bool) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return report("catch-up", Err(e.into())),
    };
    let ran = runtime.block_on(hookbox::catchup::run_cli(
        config,
        source,
        dry_run,
        CATCH_UP_WAIT,
    ));
    match ran {
        Ok(r) => {
            print!("{r}");
            if r.complete {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => report("catch-up", Err(e)),
    }
}

/// `hookbox alerts test`: a line per alert, exit 1 when any failed.
fn alerts_test(config: &Config) -> ExitCode {
    if config.alerts.is_empty() {
        eprintln!(
            "hookbox alerts test: the config ({}) has no [[alerts]]",
            config.origin
        );
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return report("alerts test", Err(e.into())),
    };
    let results = match runtime.block_on(hookbox::alerts::test_all(config)) {
        Ok(results) => results,
        Err(e) => return report("alerts test", Err(e)),
    };
    let mut failed = false;
    for (alert, result) in results {
        match result {
            Ok(()) => println!("{alert}: sent"),
            Err(why) => {
                failed = true;
                println!("{alert}: FAILED: {why}");
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Prints a verb's error the way every verb does and picks the exit code.
fn report(verb: &str, result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hookbox {verb}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn destination(config: &Config, cmd: DestinationCommand) -> anyhow::Result<()> {
    use hookbox::store::pauses::{self, Cause, Pause, PauseOp};
    let mut conn = hookbox::store::open_for_cli(&config.server.database)?;
    let (source, name, pause) = match cmd {
        DestinationCommand::List => {
            let all = pauses::load(&conn)?;
            if all.is_empty() {
                println!("no destination is paused");
            }
            for p in all {
                let by = match p.cause {
                    Cause::Manual => "by hand",
                    Cause::Breaker => "by its circuit breaker",
                };
                let since = hookbox::clock::format_ms(p.since);
                println!("{}/{}: paused {by} since {since}", p.source, p.destination);
            }
            return Ok(());
        }
        DestinationCommand::Pause { source, name } => (source, name, true),
        DestinationCommand::Resume { source, name } => (source, name, false),
    };
    let known = config
        .source(&source)
        .ok_or_else(|| anyhow::anyhow!("no source {source:?} in the config"))?;
    anyhow::ensure!(
        known.destinations.iter().any(|d| d.name == name),
        "source {source:?} has no destination {name:?} in the config"
    );
    let op = if pause {
        PauseOp::Set(Pause {
            source: source.clone(),
            destination: name.clone(),
            cause: Cause::Manual,
            since: hookbox::clock::now_ms(),
            next_probe_at: None,
        })
    } else {
        PauseOp::Lift {
            source: source.clone(),
            destination: name.clone(),
            cause: Cause::Manual,
        }
    };
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .context("starting the change")?;
    pauses::apply(&tx, &op)?;
    tx.commit().context("committing the change")?;
    let done = if pause { "paused" } else { "resumed" };
    println!("{source}/{name} {done}; a running server acts on it within 2 s");
    Ok(())
}

fn backup(config: &Config, dest: &Path, force: bool) -> anyhow::Result<()> {
    let source = backup::open_source(&config.server.database)?;
    let copied = backup::write(&source, dest, force)?;
    println!(
        "wrote {} ({} bytes, integrity_check ok)",
        copied.path.display(),
        copied.size_bytes
    );
    Ok(())
}

/// `--q` as the listing takes it, or why not.
fn search_query(config: &Config, q: &str) -> Result<SearchQuery, String> {
    if !config.search.enabled {
        return Err("q: search is off in this config ([search] enabled = false)".to_owned());
    }
    SearchQuery::parse(q).map_err(|e| e.to_string())
}

fn events(config: &Config, filter: &ListFilter, json: bool) -> anyhow::Result<()> {
    let conn = hookbox::store::open_read_only(&config.server.database)?;
    let rows = listing::list(&conn, filter)?;
    if json {
        print!("{}", listing::render_json_lines(&rows)?);
    } else {
        print!("{}", listing::render_table(&rows));
    }
    Ok(())
}

fn state_name(state: StateArg) -> &'static str {
    match state {
        StateArg::Pending => "pending",
        StateArg::Delivered => "delivered",
        StateArg::Dead => "dead",
        StateArg::Stored => "stored",
    }
}

fn purge(config: &Config, older_than: Duration, source: Option<&str>) -> anyhow::Result<()> {
    let mut conn = hookbox::store::open_for_cli(&config.server.database)?;
    let older_than_ms = i64::try_from(older_than.as_millis())
        .map_err(|_| anyhow::anyhow!("--older-than is too long"))?;
    let before = hookbox::clock::now_ms().saturating_sub(older_than_ms);
    let n = retention::purge_dead(&mut conn, before, source)?;
    println!("{n} dead event(s) purged");
    Ok(())
}
