//! `hookbox replay`: puts deliveries back to pending on the CLI's own
//! connection, so it works whether or not a server runs. What may be
//! replayed, and why not, is `dispatch::replay`'s, in the same words as
//! the admin API; this runs the plan in one transaction and says how many
//! moved.

use anyhow::Context as _;

use crate::config::Config;
use crate::dispatch::replay as plan;
use crate::store::queries;
use crate::store::replay as replay_sql;

/// What `hookbox replay` was asked for.
pub enum Replay {
    Event {
        id: i64,
        destination: Option<String>,
    },
    Bulk(plan::Bulk),
}

/// Plans and runs the replay, then prints how many deliveries moved.
pub fn run(config: &Config, which: Replay) -> anyhow::Result<()> {
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
