//! `hookbox replay`: puts deliveries back to pending on the CLI's own
//! connection, so it works whether or not a server runs. What may be
//! replayed, and why not, is `dispatch::replay`'s, in the same words as
//! the admin API; this runs the plan in one transaction and says how many
//! moved.

use std::process::ExitCode;

use anyhow::Context as _;

use super::{ReplayArgs, report};
use crate::config::Config;
use crate::dispatch::replay::{self as plan, BulkError};
use crate::store::models::State;
use crate::store::queries;
use crate::store::replay as replay_sql;

/// What `hookbox replay` was asked for.
enum Replay {
    Event {
        id: i64,
        destination: Option<String>,
    },
    Bulk(plan::Bulk),
}

/// Exit 1 when the arguments make no replay, the plan refuses it or the
/// database cannot be written.
pub fn run(config: &Config, args: ReplayArgs) -> ExitCode {
    let which = match args.id {
        Some(id) => Ok(Replay::Event {
            id,
            destination: args.destination,
        }),
        None => plan::Bulk::new(
            args.dead.then_some(State::Dead),
            args.source,
            args.destination,
            args.since,
            args.until,
        )
        .map(Replay::Bulk)
        .map_err(|e| match e {
            BulkError::NoLane => anyhow::anyhow!(
                "without --dead, name the event (ID) or both --source and --destination"
            ),
            e @ BulkError::NotReplayable(_) => e.into(),
        }),
    };
    report("replay", which.and_then(|which| replay(config, which)))
}

fn replay(config: &Config, which: Replay) -> anyhow::Result<()> {
    let mut conn = crate::store::open_for_cli(&config.server.database)?;
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
    let now = crate::clock::now_ms();
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
