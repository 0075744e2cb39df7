//! Everything the writer does, in one place: each [`WriteCmd`], how it is
//! applied inside the group's transaction, and how it is answered.
//!
//! Most answers wait until the group is durable (the syncer sends them).
//! Claims do not: a claim only sets a lease, and losing a lease to a power
//! cut means the event is delivered again, which at-least-once dispatch
//! allows; answering claims at once keeps dispatch off the fsync's path.

use rusqlite::Transaction;
use tokio::sync::oneshot;

use super::counters::{Count, Tally};
use super::deliveries::{self, AttemptRecord, ClaimFrom, Claimed, Lease};
use super::error::StoreError;
use super::ingest;
use super::ip_sets::{self, CachedSet};
use super::jobs::{self, Done as CatchupDone, Op as CatchupOp};
use super::models::{Inserted, NewEvent};
use super::pauses::{self, PauseOp};
use super::pull_leases::{self, PullLease};
use super::recent::RecentKeys;
use super::replay::{self, ReplayFilter};
use super::retention::{self, PruneBatch, Pruned};

/// Due deliveries handed to the dispatcher, and when to look again.
#[derive(Debug, Default)]
pub struct Claims {
    pub jobs: Vec<Claimed>,
    /// The earliest time (unix ms) a delivery of the asked lanes may become
    /// claimable, if any: the next one due, or a lease running out.
    pub next_due: Option<i64>,
    /// For each delivery an expired lease made dead, its
    /// [`ClaimFrom::lane`].
    pub died: Vec<usize>,
}

pub enum WriteCmd {
    Insert {
        event: NewEvent,
        reply: oneshot::Sender<Result<Inserted, StoreError>>,
    },
    /// Proves the thread is alive and the database takes a commit.
    Ping {
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// A catch-up job's bookkeeping: its lock, its runs, its redelivery
    /// requests, its mark.
    Catchup {
        op: CatchupOp,
        reply: oneshot::Sender<Result<CatchupDone, StoreError>>,
    },
    /// Renews the leases in `renew`, then leases up to `limit` due
    /// deliveries of each lane.
    Claim {
        lanes: Vec<ClaimFrom>,
        now: i64,
        lease_until: i64,
        /// The wall clock went backwards since the last claim.
        clock_went_back: bool,
        /// Leases of events the dispatcher holds, extended to `lease_until`
        /// before anything is claimed (those with under half a lease left):
        /// renewed first, none of them can look expired to this claim,
        /// whatever the wall clock did.
        renew: Vec<Lease>,
        reply: oneshot::Sender<Result<Claims, StoreError>>,
    },
    /// An attempt's outcome. Nobody waits for it: until it commits the
    /// delivery stays leased, so it cannot be claimed twice.
    Record { record: AttemptRecord, now: i64 },
    /// A destination came back: its backlog is due at once. Answered at
    /// the commit, so the dispatcher claims after it.
    MakeDue {
        source: String,
        destination: String,
        now: i64,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// A pull consumer's ack, nack, release or extend of leases it names
    /// in lane (`source`, `destination`); answers how each stood.
    Pulled {
        source: String,
        destination: String,
        leases: Vec<PullLease>,
        op: pull_leases::Op,
        now: i64,
        reply: oneshot::Sender<Result<pull_leases::Outcome, StoreError>>,
    },
    /// Gives back leases at shutdown.
    Release {
        leases: Vec<Lease>,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// Every filter in one transaction (replaying an event at each of its
    /// destinations is one change).
    Replay {
        filters: Vec<ReplayFilter>,
        now: i64,
        reply: oneshot::Sender<Result<usize, StoreError>>,
    },
    /// Retention: deletes rows or drops bodies past their window. Answered
    /// once durable, and only then are deleted keys forgotten, in the same
    /// order as inserts remember theirs.
    Prune {
        batch: PruneBatch,
        reply: oneshot::Sender<Result<usize, StoreError>>,
    },
    /// Pauses or resumes a destination, durably (`crate::dispatch::breaker`).
    Pause {
        op: PauseOp,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// Caches a freshly fetched named IP set (`crate::edge`).
    SaveIpSet {
        name: String,
        set: CachedSet,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
}

/// What one command did inside the transaction, before it was durable.
pub enum Applied {
    Inserted(Inserted),
    Catchup(CatchupDone),
    Claimed(Claims),
    Replayed(usize),
    Pulled(pull_leases::Outcome),
    Pruned(Pruned),
    Done,
}

/// The earlier of two optional times.
fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl WriteCmd {
    /// Applies the command inside the group's transaction, adding what it
    /// counts ([`super::counters`]) to `tally`.
    pub(super) fn apply(&self, tx: &Transaction, tally: &mut Tally) -> anyhow::Result<Applied> {
        Ok(match self {
            WriteCmd::Insert { event, .. } => {
                let inserted = ingest::insert(tx, event)?;
                if let Inserted::New(_) = inserted {
                    tally.add(&event.source, event.received_at, Count::Received);
                }
                Applied::Inserted(inserted)
            }
            WriteCmd::Catchup { op, .. } => Applied::Catchup(jobs::apply(tx, op)?),
            WriteCmd::Ping { .. } => {
                ingest::heartbeat(tx)?;
                Applied::Done
            }
            WriteCmd::Claim {
                lanes,
                now,
                lease_until,
                clock_went_back,
                renew,
                ..
            } => {
                deliveries::renew(tx, renew, *now, *lease_until)?;
                let mut claims = Claims::default();
                for from in lanes {
                    let (source, destination) = (from.source.as_str(), from.destination.as_str());
                    deliveries::clamp_retries(tx, source, destination, *now, from.max_delay_ms)?;
                    if *clock_went_back {
                        deliveries::clamp_leases(tx, source, destination, *lease_until)?;
                    }
                    let died = deliveries::expire(tx, from, *now, tally)?;
                    claims.died.extend(std::iter::repeat_n(from.lane, died));
                    if from.limit > 0 {
                        claims
                            .jobs
                            .extend(deliveries::claim(tx, from, *now, *lease_until)?);
                    }
                    let due = earliest(
                        deliveries::next_due(tx, source, destination, *now)?,
                        deliveries::next_lease_end(tx, source, destination, *now)?,
                    );
                    claims.next_due = earliest(claims.next_due, due);
                }
                Applied::Claimed(claims)
            }
            WriteCmd::Record { record, now } => {
                deliveries::record(tx, record, *now)?;
                tally.attempt(record);
                Applied::Done
            }
            WriteCmd::MakeDue {
                source,
                destination,
                now,
                ..
            } => {
                deliveries::make_due(tx, source, destination, *now)?;
                Applied::Done
            }
            WriteCmd::Release { leases, .. } => {
                deliveries::release(tx, leases)?;
                Applied::Done
            }
            WriteCmd::Pulled {
                source,
                destination,
                leases,
                op,
                now,
                ..
            } => Applied::Pulled(pull_leases::apply(
                tx,
                source,
                destination,
                leases,
                op,
                *now,
                tally,
            )?),
            WriteCmd::Replay { filters, now, .. } => {
                let mut n = 0;
                for filter in filters {
                    n += replay::replay(tx, filter, *now)?;
                }
                Applied::Replayed(n)
            }
            WriteCmd::Prune { batch, .. } => Applied::Pruned(retention::apply(tx, batch)?),
            WriteCmd::SaveIpSet { name, set, .. } => {
                ip_sets::save(tx, name, set)?;
                Applied::Done
            }
            WriteCmd::Pause { op, .. } => {
                pauses::apply(tx, op)?;
                Applied::Done
            }
        })
    }

    /// True for commands answered as soon as their group commits.
    pub(super) fn answers_before_sync(&self) -> bool {
        matches!(
            self,
            WriteCmd::Claim { .. } | WriteCmd::Record { .. } | WriteCmd::MakeDue { .. }
        )
    }

    /// Answers with the command's result and remembers a stored event's
    /// key. A dropped receiver means the asker went away; there is nobody
    /// to tell.
    pub(super) fn answer(self, applied: Applied, recent: &RecentKeys) {
        match (self, applied) {
            (WriteCmd::Insert { event, reply }, Applied::Inserted(inserted)) => {
                let (Inserted::New(id) | Inserted::Duplicate(id)) = inserted;
                recent.insert(&event.source, &event.delivery_id, id);
                drop(reply.send(Ok(inserted)))
            }
            (WriteCmd::Claim { reply, .. }, Applied::Claimed(claims)) => {
                drop(reply.send(Ok(claims)))
            }
            (WriteCmd::Catchup { reply, .. }, Applied::Catchup(done)) => drop(reply.send(Ok(done))),
            (WriteCmd::Replay { reply, .. }, Applied::Replayed(n)) => drop(reply.send(Ok(n))),
            (WriteCmd::Pulled { reply, .. }, Applied::Pulled(outcome)) => {
                drop(reply.send(Ok(outcome)))
            }
            (WriteCmd::Prune { reply, .. }, Applied::Pruned(pruned)) => {
                for (source, delivery_id) in &pruned.keys {
                    recent.forget(source, delivery_id);
                }
                drop(reply.send(Ok(pruned.rows)))
            }
            (WriteCmd::Ping { reply }, _)
            | (WriteCmd::Release { reply, .. }, _)
            | (WriteCmd::SaveIpSet { reply, .. }, _)
            | (WriteCmd::Pause { reply, .. }, _) => drop(reply.send(Ok(()))),
            (WriteCmd::Record { .. }, _) => {}
            (WriteCmd::MakeDue { reply, .. }, _) => drop(reply.send(Ok(()))),
            (cmd, _) => cmd.fail(StoreError::Unavailable(
                "internal: mismatched result".into(),
            )),
        }
    }

    pub(super) fn fail(self, err: StoreError) {
        match self {
            WriteCmd::Insert { reply, .. } => drop(reply.send(Err(err))),
            WriteCmd::Ping { reply }
            | WriteCmd::Release { reply, .. }
            | WriteCmd::SaveIpSet { reply, .. }
            | WriteCmd::Pause { reply, .. } => drop(reply.send(Err(err))),
            WriteCmd::Claim { reply, .. } => drop(reply.send(Err(err))),
            WriteCmd::Pulled { reply, .. } => drop(reply.send(Err(err))),
            WriteCmd::Catchup { reply, .. } => drop(reply.send(Err(err))),
            WriteCmd::Replay { reply, .. } | WriteCmd::Prune { reply, .. } => {
                drop(reply.send(Err(err)))
            }
            WriteCmd::MakeDue { reply, .. } => drop(reply.send(Err(err))),
            WriteCmd::Record { record, .. } => {
                // The event stays leased; when the lease runs out it is
                // delivered again.
                tracing::warn!(
                    event.id = record.event_id,
                    destination = %record.destination,
                    "an attempt's outcome was not recorded"
                );
            }
        }
    }
}
