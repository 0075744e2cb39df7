//! The `hookbox` command: parses the command line and hands each verb to
//! its module under `hookbox::cli`, which holds the definitions too.

use std::process::ExitCode;

use clap::Parser as _;

use hookbox::cli::{self, AlertsCommand, Cli, Command};
use hookbox::delivery::transform;
use hookbox::telemetry;

// glibc's malloc took 40 % of a transform process's time (jq values are
// many small allocations): with mimalloc a program run takes a third
// less, and the server delivers faster (docs/src/benchmark.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // hookbox's own transform process (`delivery::transform::child`): not
    // a verb a person types, so not one clap lists.
    if std::env::args_os().nth(1).as_deref() == Some(transform::child::ARG.as_ref()) {
        return transform::child::serve();
    }
    let Cli {
        config,
        log_format,
        command,
    } = Cli::parse();
    telemetry::init(log_format);
    // A client of another hookbox, and the CLI's own documentation: no
    // config, no database.
    let command = match command {
        Command::Listen(args) => return cli::listen::run(*args),
        Command::Man { out_dir } => return cli::manual::man(out_dir.as_deref()),
        Command::Completions { shell } => return cli::manual::completions(shell),
        command => command,
    };
    let config = match cli::load_config(config.as_deref(), command.needs_secrets()) {
        Ok(config) => config,
        Err(code) => return code,
    };
    match command {
        Command::Serve => cli::serve::run(config),
        Command::Check => cli::check::run(&config),
        Command::Healthcheck => cli::healthcheck::run(&config),
        Command::Replay(args) => cli::replay::run(&config, args),
        Command::Backup { dest, force } => cli::backup::run(&config, &dest, force),
        Command::Events(args) => cli::events::run(&config, args),
        Command::Purge {
            dead: _,
            older_than,
            source,
        } => cli::purge::run(&config, older_than, source.as_deref()),
        Command::CatchUp {
            source,
            dry_run,
            report,
            window,
        } => match report {
            true => cli::catchup::ledger(&config, &source, window),
            false => cli::catchup::run(&config, &source, dry_run),
        },
        Command::Destination(cmd) => {
            cli::report("destination", cli::destination::run(&config, cmd))
        }
        Command::Alerts(AlertsCommand::Test) => cli::alerts::test(&config),
        Command::Try(args) => cli::trial::run(&config, args),
        // Answered above; here too so that the match says every verb.
        Command::Listen(args) => cli::listen::run(*args),
        Command::Man { out_dir } => cli::manual::man(out_dir.as_deref()),
        Command::Completions { shell } => cli::manual::completions(shell),
    }
}
