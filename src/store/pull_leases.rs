//! The leases a pull consumer holds, as it names them, and what it may do
//! with them: ack, nack, release or extend.
//!
//! A consumer names a lease `"<delivery>.<secret>"`, the secret being the
//! 16 random bytes its claim drew, in hex. The row's token is a counter
//! and never leaves the server: a token that can be guessed would let any
//! holder of a pull token settle any lease in the database. Each lease
//! named is looked up within the lane of the request's URL only, so a
//! lease of another lane, push lanes included, is unknown here whatever
//! its secret.
//!
//! Every operation answers how each named lease stood: held (and so
//! changed), stale (a delivery of the lane, but this claim of it was
//! settled, released, superseded or ran out) or unknown (no delivery of
//! the lane has that number): the API counts unknown ones as a sign of
//! guessing.

use anyhow::Context as _;
use rusqlite::{Connection, OptionalExtension as _, Transaction, params};
use subtle::ConstantTimeEq as _;

use super::counters::Tally;
use super::deliveries::{self, AttemptRecord, Lease, OnFailure, SECRET_LEN, Settled};
use super::write::Write;

/// A lease as a pull consumer names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullLease {
    /// `deliveries.id`.
    pub delivery: i64,
    pub secret: [u8; SECRET_LEN],
}

impl PullLease {
    /// Reads a lease as [`PullLease`]'s `Display` writes it; `None` for
    /// anything else.
    pub fn parse(text: &str) -> Option<PullLease> {
        let (delivery, secret) = text.split_once('.')?;
        if delivery.starts_with('+') {
            return None;
        }
        let delivery = delivery.parse().ok().filter(|n: &i64| *n > 0)?;
        let mut bytes = [0; SECRET_LEN];
        hex::decode_to_slice(secret, &mut bytes).ok()?;
        Some(PullLease {
            delivery,
            secret: bytes,
        })
    }
}

impl std::fmt::Display for PullLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.delivery, hex::encode(self.secret))
    }
}

/// What a consumer does with the leases it names.
pub enum Op {
    /// Delivered.
    Ack,
    /// A failed attempt, kept with `error`, settled by the lane's rule.
    Nack {
        on_failure: OnFailure,
        error: String,
    },
    /// Given back untried: no attempt counts, the delivery is due again.
    Release,
    /// Still working on it: the lease runs until `lease_until`.
    Extend { lease_until: i64 },
}

/// How one named lease stood when the operation came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// This claim held the delivery; the operation applied.
    Held,
    /// A delivery of the lane, but not under this claim any more.
    Stale,
    /// No delivery of the lane has this number.
    Unknown,
}

/// What an operation did to each lease, in the order named, and how many
/// deliveries a nack made dead.
#[derive(Debug, Default)]
pub struct Outcome {
    pub standing: Vec<Standing>,
    pub died: usize,
}

/// A pull consumer's `op` on the leases it names in lane (`source`,
/// `destination`), durably; answers how each stood.
pub struct Pulled {
    pub source: String,
    pub destination: String,
    pub leases: Vec<PullLease>,
    pub op: Op,
    pub now: i64,
}

impl Write for Pulled {
    type Output = Outcome;

    fn apply(&mut self, tx: &Transaction, tally: &mut Tally) -> anyhow::Result<Outcome> {
        apply(
            tx,
            &self.source,
            &self.destination,
            &self.leases,
            &self.op,
            self.now,
            tally,
        )
    }
}

/// Applies `op` to each of `leases` that lane (`source`, `destination`)
/// still holds at `now`; the others change nothing.
pub fn apply(
    conn: &Connection,
    source: &str,
    destination: &str,
    leases: &[PullLease],
    op: &Op,
    now: i64,
    tally: &mut Tally,
) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::default();
    for lease in leases {
        let standing = match find(conn, source, destination, lease, now)? {
            Found::Unknown => Standing::Unknown,
            Found::Stale => Standing::Stale,
            Found::Held(held) => {
                let died = act(conn, source, destination, held, op, now, tally)?;
                outcome.died += usize::from(died);
                Standing::Held
            }
        };
        outcome.standing.push(standing);
    }
    Ok(outcome)
}

/// A lease this lane still holds.
struct Held {
    lease: Lease,
    event_id: i64,
    attempt: u32,
}

enum Found {
    Held(Held),
    Stale,
    Unknown,
}

fn find(
    conn: &Connection,
    source: &str,
    destination: &str,
    named: &PullLease,
    now: i64,
) -> anyhow::Result<Found> {
    type Row = (i64, Option<i64>, Option<u32>, Option<i64>, Option<Vec<u8>>);
    let row: Option<Row> = conn
        .prepare_cached(
            "SELECT d.event_id, l.token, l.attempt, l.lease_until, l.secret
             FROM deliveries AS d LEFT JOIN leases AS l ON l.delivery = d.id
             WHERE d.id = ?1 AND d.source = ?2 AND d.destination = ?3",
        )?
        .query_row(params![named.delivery, source, destination], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .optional()
        .context("finding a pulled lease")?;
    let Some((event_id, token, attempt, lease_until, secret)) = row else {
        return Ok(Found::Unknown);
    };
    let (Some(token), Some(attempt), Some(lease_until), Some(secret)) =
        (token, attempt, lease_until, secret)
    else {
        return Ok(Found::Stale);
    };
    // Compared in constant time: the secret is all that proves the claim.
    let same: bool = secret.as_slice().ct_eq(named.secret.as_slice()).into();
    if !same || lease_until <= now {
        return Ok(Found::Stale);
    }
    Ok(Found::Held(Held {
        lease: Lease {
            delivery: named.delivery,
            token,
        },
        event_id,
        attempt,
    }))
}

/// Applies `op` to a held lease; `true` when it made the delivery dead.
fn act(
    conn: &Connection,
    source: &str,
    destination: &str,
    held: Held,
    op: &Op,
    now: i64,
    tally: &mut Tally,
) -> anyhow::Result<bool> {
    let (settled, error) = match op {
        Op::Ack => (Settled::Delivered, None),
        Op::Nack { on_failure, error } => (
            on_failure.decide(held.attempt, false, now),
            Some(error.clone()),
        ),
        Op::Release => {
            deliveries::release(conn, &[held.lease])?;
            return Ok(false);
        }
        Op::Extend { lease_until } => {
            conn.prepare_cached("UPDATE leases SET lease_until = ?2 WHERE token = ?1")?
                .execute(params![held.lease.token, lease_until])
                .context("extending a pulled lease")?;
            return Ok(false);
        }
    };
    let record_of = AttemptRecord {
        lease: held.lease,
        event_id: held.event_id,
        source: source.to_owned(),
        destination: destination.to_owned(),
        attempt: held.attempt,
        started_at: now,
        duration_ms: 0,
        settled,
        status: None,
        error,
        counted: true,
    };
    deliveries::record(conn, &record_of, now)?;
    tally.attempt(&record_of);
    Ok(settled == Settled::Dead)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_read_back_as_written_and_nothing_else_parses() {
        let lease = PullLease {
            delivery: 12,
            secret: [0xab; SECRET_LEN],
        };
        let text = lease.to_string();
        assert_eq!(text, format!("12.{}", "ab".repeat(SECRET_LEN)));
        assert_eq!(PullLease::parse(&text), Some(lease));
        let secret = "ab".repeat(SECRET_LEN);
        for bad in [
            String::new(),
            "12".to_owned(),
            "12.".to_owned(),
            "12.345".to_owned(),
            format!(".{secret}"),
            format!("0.{secret}"),
            format!("-1.{secret}"),
            format!("+1.{secret}"),
            format!("1.{secret}ab"),
            format!("1.{}", &secret[2..]),
            format!("1.{}zz", &secret[2..]),
            format!(" 1.{secret}"),
        ] {
            assert_eq!(PullLease::parse(&bad), None, "{bad:?}");
        }
    }
}
