//! The SQL of destination pauses (`destination_pauses`): which
//! destinations are paused, by hand or by their circuit breaker, so that a
//! restart keeps them paused. `crate::delivery::breaker` decides; this
//! module only stores its decisions.

use anyhow::Context;
use rusqlite::{Connection, Transaction, params};

use super::counters::Tally;
use super::write::Write;

/// Why a destination is paused. Both can hold at once: a destination
/// paused by hand whose breaker had opened stays paused by its breaker
/// after the hand lets go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cause {
    /// `hookbox destination pause` or the API: nothing goes until resumed.
    Manual,
    /// The circuit breaker: a probe goes now and then.
    Breaker,
}

impl Cause {
    fn as_str(self) -> &'static str {
        match self {
            Cause::Manual => "manual",
            Cause::Breaker => "breaker",
        }
    }
}

/// One pause of one destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pause {
    pub source: String,
    pub destination: String,
    pub cause: Cause,
    /// Unix ms.
    pub since: i64,
    /// Unix ms; a breaker's next probe.
    pub next_probe_at: Option<i64>,
}

/// Sets or lifts one pause of a destination.
#[derive(Debug, Clone)]
pub enum PauseOp {
    Set(Pause),
    Lift {
        source: String,
        destination: String,
        cause: Cause,
    },
}

/// Pausing or resuming is in no hurry but must be done: its sender waits
/// for room in the queue.
impl Write for PauseOp {
    type Output = ();
    const WAITS_FOR_ROOM: bool = true;

    fn apply(&mut self, tx: &Transaction, _: &mut Tally) -> anyhow::Result<()> {
        apply(tx, self)
    }
}

/// Applies `op`; setting a pause that is already set keeps its `since`.
pub fn apply(tx: &Transaction, op: &PauseOp) -> anyhow::Result<()> {
    match op {
        PauseOp::Set(p) => tx
            .prepare_cached(
                "INSERT INTO destination_pauses (source, destination, cause, since, next_probe_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (source, destination, cause)
                 DO UPDATE SET next_probe_at = excluded.next_probe_at",
            )?
            .execute(params![
                p.source,
                p.destination,
                p.cause.as_str(),
                p.since,
                p.next_probe_at
            ])
            .with_context(|| format!("pausing {}/{}", p.source, p.destination))?,
        PauseOp::Lift {
            source,
            destination,
            cause,
        } => tx
            .prepare_cached(
                "DELETE FROM destination_pauses
                 WHERE source = ?1 AND destination = ?2 AND cause = ?3",
            )?
            .execute(params![source, destination, cause.as_str()])
            .with_context(|| format!("resuming {source}/{destination}"))?,
    };
    Ok(())
}

/// Every pause, as the last run left them.
pub fn load(conn: &Connection) -> anyhow::Result<Vec<Pause>> {
    let mut stmt = conn.prepare_cached(
        "SELECT source, destination, cause, since, next_probe_at FROM destination_pauses
         ORDER BY source, destination, cause",
    )?;
    let rows = stmt.query_map([], |r| {
        let cause: String = r.get(2)?;
        Ok(Pause {
            source: r.get(0)?,
            destination: r.get(1)?,
            cause: if cause == "manual" {
                Cause::Manual
            } else {
                Cause::Breaker
            },
            since: r.get(3)?,
            next_probe_at: r.get(4)?,
        })
    })?;
    rows.collect::<Result<_, _>>()
        .context("reading the destinations' pauses")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pause(cause: Cause, since: i64, next_probe_at: Option<i64>) -> Pause {
        Pause {
            source: "gh".into(),
            destination: "ci".into(),
            cause,
            since,
            next_probe_at,
        }
    }

    #[test]
    fn pauses_are_kept_by_cause_and_lifted_one_cause_at_a_time() {
        let mut conn = crate::store::test_support::db();
        let ops = [
            PauseOp::Set(pause(Cause::Breaker, 10, Some(40))),
            PauseOp::Set(pause(Cause::Manual, 20, None)),
            // Set again: a later probe time, the same `since`.
            PauseOp::Set(pause(Cause::Breaker, 30, Some(90))),
        ];
        for op in &ops {
            let tx = conn.transaction().unwrap();
            apply(&tx, op).unwrap();
            tx.commit().unwrap();
        }
        assert_eq!(
            load(&conn).unwrap(),
            vec![
                pause(Cause::Breaker, 10, Some(90)),
                pause(Cause::Manual, 20, None)
            ]
        );
        let tx = conn.transaction().unwrap();
        let lift = PauseOp::Lift {
            source: "gh".into(),
            destination: "ci".into(),
            cause: Cause::Manual,
        };
        apply(&tx, &lift).unwrap();
        tx.commit().unwrap();
        assert_eq!(
            load(&conn).unwrap(),
            vec![pause(Cause::Breaker, 10, Some(90))]
        );
    }
}
