//! The SQL of the cached IP sets (`ip_sets`): the last list fetched of each
//! named set, kept so a restart without network still has one.
//! `crate::edge` parses and fetches; this module only stores text.

use anyhow::Context;
use rusqlite::{Connection, OptionalExtension, Transaction, params};

use super::counters::Tally;
use super::write::Write;

/// A cached list: its CIDRs as a JSON array, and when it was fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedSet {
    pub ranges: String,
    /// Unix ms.
    pub fetched_at: i64,
}

/// Caches a freshly fetched set, durably. Its sender waits for room in the
/// queue: a refresh is never in a hurry.
pub struct Save {
    pub name: String,
    pub set: CachedSet,
}

impl Write for Save {
    type Output = ();
    const WAITS_FOR_ROOM: bool = true;

    fn apply(&mut self, tx: &Transaction, _: &mut Tally) -> anyhow::Result<()> {
        save(tx, &self.name, &self.set)
    }
}

/// Replaces the cached list of `name`.
pub fn save(tx: &Transaction, name: &str, set: &CachedSet) -> anyhow::Result<()> {
    tx.prepare_cached(
        "INSERT INTO ip_sets (name, ranges, fetched_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (name) DO UPDATE SET ranges = excluded.ranges, fetched_at = excluded.fetched_at",
    )?
    .execute(params![name, set.ranges, set.fetched_at])
    .with_context(|| format!("caching the IP set {name}"))?;
    Ok(())
}

/// The cached list of `name`, if one was ever fetched.
pub fn load(conn: &Connection, name: &str) -> anyhow::Result<Option<CachedSet>> {
    conn.prepare_cached("SELECT ranges, fetched_at FROM ip_sets WHERE name = ?1")?
        .query_row([name], |r| {
            Ok(CachedSet {
                ranges: r.get(0)?,
                fetched_at: r.get(1)?,
            })
        })
        .optional()
        .with_context(|| format!("reading the cached IP set {name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_set_replaces_the_previous_one() {
        let mut conn = crate::store::test_support::db();
        assert_eq!(load(&conn, "github").unwrap(), None);
        for (ranges, at) in [("[\"10.0.0.0/8\"]", 1), ("[\"192.0.2.0/24\"]", 2)] {
            let tx = conn.transaction().unwrap();
            let set = CachedSet {
                ranges: ranges.into(),
                fetched_at: at,
            };
            save(&tx, "github", &set).unwrap();
            tx.commit().unwrap();
        }
        let got = load(&conn, "github").unwrap().unwrap();
        assert_eq!(got.ranges, "[\"192.0.2.0/24\"]");
        assert_eq!(got.fetched_at, 2);
    }
}
