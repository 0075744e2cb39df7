//! `hookbox replay`: puts deliveries back to pending through a writer of
//! its own, so it works whether or not a server runs. What may be
//! replayed, and why not, is `delivery::replay`'s, in the same words as
//! the admin API; this sends the plan as one write (the admin API's) and
//! says how many moved.

use std::process::ExitCode;

use super::{ReplayArgs, report, with_store};
use crate::config::Config;
use crate::delivery::replay::{self as plan, BulkError};
use crate::store::models::State;
use crate::store::{Replay, queries};

/// What `hookbox replay` was asked for.
enum Asked {
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
        Some(id) => Ok(Asked::Event {
            id,
            destination: args.destination,
        }),
        None => plan::Bulk::new(
            (args.dead.then_some(State::Dead)).or(args.skipped.then_some(State::Skipped)),
            args.source,
            args.destination,
            args.since,
            args.until,
        )
        .map(Asked::Bulk)
        .map_err(|e| match e {
            BulkError::NoLane => anyhow::anyhow!(
                "without --dead or --skipped, name the event (ID) or both --source and --destination"
            ),
            e @ BulkError::NotReplayable(_) => e.into(),
        }),
    };
    report("replay", which.and_then(|which| replay(config, which)))
}

fn replay(config: &Config, which: Asked) -> anyhow::Result<()> {
    let n = with_store(config, |store, writer| async move {
        let filters = match &which {
            Asked::Event { id, destination } => {
                let id = *id;
                let event = store
                    .read(move |c| queries::event_state(c, id))
                    .await?
                    .ok_or_else(|| anyhow::anyhow!("no event {id}"))?;
                plan::event(config, &event, id, destination.as_deref())?
            }
            Asked::Bulk(bulk) => plan::bulk(config, bulk)?,
        };
        // One write: the reset, the deliveries created and the re-holding
        // of what is now behind a replayed one go together.
        let now = crate::support::clock::now_ms();
        Ok(writer.write(Replay { filters, now }).await?)
    })?;
    match n {
        1 => println!("1 delivery put back to pending or created"),
        n => println!("{n} deliveries put back to pending or created"),
    }
    Ok(())
}
