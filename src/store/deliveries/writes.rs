//! The writes of delivery, as the writer runs them: a claim (with its
//! renewals, lease expiry and per-lane clamps), an attempt's outcome, a
//! backlog made due, leases given back. The SQL is the parent module's.
//!
//! Claims and outcomes are answered at the commit, not once durable
//! ([`Write::AT_COMMIT`]): a claim only sets a lease, and a lost lease or
//! outcome means the event is delivered again, which at-least-once delivery
//! allows; so dispatch stays off the fsync's path.

use rusqlite::Transaction;

use super::{AttemptRecord, ClaimFrom, Claimed, Lease};
use crate::store::counters::Tally;
use crate::store::error::StoreError;
use crate::store::write::Write;

/// Renews the leases in `renew`, then leases up to `limit` due deliveries
/// of each lane.
pub struct Claim {
    pub lanes: Vec<ClaimFrom>,
    pub now: i64,
    pub lease_until: i64,
    /// The wall clock went backwards since the last claim.
    pub clock_went_back: bool,
    /// Leases of events the dispatcher holds, extended to `lease_until`
    /// before anything is claimed (those with under half a lease left):
    /// renewed first, none of them can look expired to this claim,
    /// whatever the wall clock did.
    pub renew: Vec<Lease>,
}

/// Due deliveries handed to the dispatcher, and when to look again.
#[derive(Debug, Default)]
pub struct Claims {
    pub claimed: Vec<Claimed>,
    /// The earliest time (unix ms) a delivery of the asked lanes may become
    /// claimable, if any: the next one due, or a lease running out.
    pub next_due: Option<i64>,
    /// For each delivery an expired lease made dead, its
    /// [`ClaimFrom::lane`].
    pub died: Vec<usize>,
}

/// The earlier of two optional times.
fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl Write for Claim {
    type Output = Claims;
    const AT_COMMIT: bool = true;

    fn apply(&mut self, tx: &Transaction, tally: &mut Tally) -> anyhow::Result<Claims> {
        let (now, lease_until) = (self.now, self.lease_until);
        super::renew(tx, &self.renew, now, lease_until)?;
        let mut claims = Claims::default();
        for from in &self.lanes {
            let (source, destination) = (from.source.as_str(), from.destination.as_str());
            super::clamp_retries(tx, source, destination, now, from.max_delay_ms)?;
            if self.clock_went_back {
                super::clamp_leases(tx, source, destination, lease_until)?;
            }
            let died = super::expire(tx, from, now, tally)?;
            claims.died.extend(std::iter::repeat_n(from.lane, died));
            if from.limit > 0 {
                claims
                    .claimed
                    .extend(super::claim(tx, from, now, lease_until)?);
            }
            let due = earliest(
                super::next_due(tx, source, destination, now)?,
                super::next_lease_end(tx, source, destination, now)?,
            );
            claims.next_due = earliest(claims.next_due, due);
        }
        Ok(claims)
    }
}

/// An attempt's outcome. Nobody waits for it (`WriterHandle::queue`):
/// until it commits the delivery stays leased, so it cannot be claimed
/// twice. Its sender waits for room rather than dropping it when ingest has
/// filled the queue: a dropped outcome would mean a second delivery.
pub struct Record {
    pub record: AttemptRecord,
    pub now: i64,
}

impl Write for Record {
    type Output = ();
    const AT_COMMIT: bool = true;
    const WAITS_FOR_ROOM: bool = true;

    fn apply(&mut self, tx: &Transaction, tally: &mut Tally) -> anyhow::Result<()> {
        super::record(tx, &self.record, self.now)?;
        tally.attempt(&self.record);
        Ok(())
    }

    fn failed(&self, _: &StoreError) {
        // The event stays leased; when the lease runs out it is delivered
        // again.
        tracing::warn!(
            event.id = self.record.event_id,
            destination = %self.record.destination,
            "an attempt's outcome was not recorded"
        );
    }
}

/// A destination came back: its backlog is due at once. Answered at the
/// commit, so the dispatcher claims after it.
pub struct MakeDue {
    pub source: String,
    pub destination: String,
    pub now: i64,
}

impl Write for MakeDue {
    type Output = ();
    const AT_COMMIT: bool = true;
    const WAITS_FOR_ROOM: bool = true;

    fn apply(&mut self, tx: &Transaction, _: &mut Tally) -> anyhow::Result<()> {
        super::make_due(tx, &self.source, &self.destination, self.now)?;
        Ok(())
    }
}

/// Gives back leases that will not be used, durably (at shutdown, or when
/// a pull request went away).
pub struct Release(pub Vec<Lease>);

impl Write for Release {
    type Output = ();

    fn apply(&mut self, tx: &Transaction, _: &mut Tally) -> anyhow::Result<()> {
        super::release(tx, &self.0)
    }
}
