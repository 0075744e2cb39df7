//! `hookbox destination pause|resume|list`: manual pauses for planned
//! maintenance, written to the database by a writer of the command's own
//! so they work whether or not a server runs (a running one reads them
//! within 2 s). The pause rows, and the write, are `store::pauses`'s.

use super::{DestinationCommand, with_store};
use crate::config::Config;
use crate::store::pauses::{self, Cause, Pause, PauseOp};

/// Lists the pauses, or sets or lifts one at a destination the config has.
pub fn run(config: &Config, cmd: DestinationCommand) -> anyhow::Result<()> {
    let (source, name, pause) = match cmd {
        DestinationCommand::List => {
            let conn = crate::store::open_read_only(&config.server.database)?;
            let all = pauses::load(&conn)?;
            if all.is_empty() {
                println!("no destination is paused");
            }
            for p in all {
                let by = match p.cause {
                    Cause::Manual => "by hand",
                    Cause::Breaker => "by its circuit breaker",
                };
                let since = crate::support::clock::format_ms(p.since);
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
            since: crate::support::clock::now_ms(),
            next_probe_at: None,
        })
    } else {
        PauseOp::Lift {
            source: source.clone(),
            destination: name.clone(),
            cause: Cause::Manual,
        }
    };
    with_store(
        config,
        |_, writer| async move { Ok(writer.write(op).await?) },
    )?;
    let done = if pause { "paused" } else { "resumed" };
    println!("{source}/{name} {done}; a running server acts on it within 2 s");
    Ok(())
}
