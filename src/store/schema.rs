//! The schema and its migrations, keyed on `PRAGMA user_version`.
//!
//! A new database gets `schema.sql` (the whole current schema) in one
//! transaction. An older one gets each step in [`MIGRATIONS`] from its
//! version up, each in its own transaction with the version bump, so a
//! crash mid-upgrade leaves a database at a version we know. A database
//! newer than this binary is refused: downgrading would drop what it means.

use anyhow::{Context, bail};
use rusqlite::Connection;

/// The version `schema.sql` describes.
pub const SCHEMA_VERSION: i64 = 21;

const SCHEMA: &str = include_str!("../../schema.sql");

/// Upgrade steps: `MIGRATIONS[i]` takes a database from version `i + 1` to
/// `i + 2`. `schema.sql` must always equal version 1 plus every step, which
/// a test checks.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0002_catchup.sql"),
    include_str!("migrations/0003_ip_sets.sql"),
    include_str!("migrations/0004_dead_index.sql"),
    include_str!("migrations/0005_leased_index.sql"),
    include_str!("migrations/0006_hold_behind_key.sql"),
    include_str!("migrations/0007_catchup_log_retention.sql"),
    include_str!("migrations/0008_leases.sql"),
    include_str!("migrations/0009_deliveries.sql"),
    include_str!("migrations/0010_destination_pauses.sql"),
    include_str!("migrations/0011_search.sql"),
    include_str!("migrations/0012_rejections.sql"),
    include_str!("migrations/0013_counters.sql"),
    include_str!("migrations/0014_search_merges.sql"),
    include_str!("migrations/0015_rejection_repeats.sql"),
    include_str!("migrations/0016_state_checks.sql"),
    include_str!("migrations/0017_lease_secrets.sql"),
    include_str!("migrations/0018_catchup_ledger.sql"),
    include_str!("migrations/0019_skipped.sql"),
    include_str!("migrations/0020_search_file.sql"),
    include_str!("migrations/0021_event_outcomes.sql"),
];

pub fn apply(conn: &mut Connection) -> anyhow::Result<()> {
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .context("reading the schema version")?;
    if version > SCHEMA_VERSION {
        bail!(
            "the database is at schema version {version}, newer than this hookbox knows ({SCHEMA_VERSION}); \
             run the newer hookbox or restore a backup"
        );
    }
    if version == 0 {
        let tx = conn
            .transaction()
            .context("starting the schema transaction")?;
        tx.execute_batch(SCHEMA).context("creating the schema")?;
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        tx.commit().context("committing the schema")?;
        return Ok(());
    }
    for (step, sql) in MIGRATIONS.iter().enumerate().skip((version - 1) as usize) {
        let to = step as i64 + 2;
        let tx = conn.transaction()?;
        tx.execute_batch(sql)
            .with_context(|| format!("migrating the schema to version {to}"))?;
        bump_schema_cookie(&tx)?;
        tx.pragma_update(None, "user_version", to)?;
        tx.commit()
            .with_context(|| format!("committing schema version {to}"))?;
    }
    Ok(())
}

/// Tells every connection, this one included, to read the schema again.
/// DDL does this itself; a step that edits `sqlite_schema`'s text under
/// `writable_schema` (16) does not, and a connection that kept the old
/// text would go on checking the old constraints.
fn bump_schema_cookie(conn: &Connection) -> anyhow::Result<()> {
    let cookie: i64 = conn
        .pragma_query_value(None, "schema_version", |r| r.get(0))
        .context("reading the schema cookie")?;
    conn.pragma_update(None, "schema_version", cookie + 1)
        .context("bumping the schema cookie")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_reach_the_version_schema_sql_describes() {
        assert_eq!(MIGRATIONS.len() as i64 + 1, SCHEMA_VERSION);
    }

    /// `schema.sql` as it was at version 1, to prove upgrades reach the
    /// same schema as a fresh start.
    const V1: &str = include_str!("migrations/0001_schema_v1.sql");

    /// A database at `version`, as hookbox left it at that version: version
    /// 1 and the steps after it.
    fn at_version(version: i64) -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(V1).unwrap();
        for sql in &MIGRATIONS[..(version - 1) as usize] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", version).unwrap();
        conn
    }

    fn schema_of(conn: &Connection) -> Vec<(String, String)> {
        conn.prepare("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    #[test]
    fn an_upgraded_database_has_the_schema_of_a_new_one() {
        let mut old = Connection::open_in_memory().unwrap();
        old.execute_batch(V1).unwrap();
        old.pragma_update(None, "user_version", 1).unwrap();
        apply(&mut old).unwrap();
        let mut new = Connection::open_in_memory().unwrap();
        apply(&mut new).unwrap();
        let normalise = |rows: Vec<(String, String)>| -> Vec<(String, String)> {
            rows.into_iter()
                .map(|(n, sql)| (n, sql.split_whitespace().collect::<Vec<_>>().join(" ")))
                .collect()
        };
        assert_eq!(normalise(schema_of(&old)), normalise(schema_of(&new)));
        let version: i64 = old
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
    }

    #[test]
    fn version_6_holds_the_backlog_of_each_key_behind_its_oldest() {
        let mut conn = at_version(5);
        // As version 5 left them: every pending event scheduled.
        conn.execute_batch(
            "INSERT INTO events (source, delivery_id, order_key, received_at, state, next_attempt_at)
             VALUES ('s', 'a1', 'A', 1, 'pending', 1), ('s', 'a2', 'A', 2, 'pending', 2),
                    ('s', 'b1', 'B', 3, 'pending', 3), ('s', 'n', NULL, 4, 'pending', 4),
                    ('t', 'a1', 'A', 5, 'pending', 5), ('s', 'a0', 'A', 0, 'dead', NULL);",
        )
        .unwrap();
        apply(&mut conn).unwrap();
        let scheduled: Vec<String> = conn
            .prepare(
                "SELECT source || '/' || delivery_id FROM events
                 WHERE next_attempt_at IS NOT NULL ORDER BY id",
            )
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(scheduled, ["s/a1", "s/b1", "s/n", "t/a1"]);
    }

    /// Every row of `table`, every column as text, in key order.
    fn rows_of(conn: &Connection, table: &str) -> Vec<Vec<Option<String>>> {
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM {table} ORDER BY 1, 2"))
            .unwrap();
        let columns = stmt.column_count();
        stmt.query_map([], |r| {
            (0..columns)
                .map(|i| {
                    Ok(match r.get_ref(i)? {
                        rusqlite::types::ValueRef::Null => None,
                        rusqlite::types::ValueRef::Integer(n) => Some(n.to_string()),
                        rusqlite::types::ValueRef::Real(x) => Some(x.to_string()),
                        rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => {
                            Some(hex::encode(t))
                        }
                    })
                })
                .collect()
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
    }

    #[test]
    fn version_8_keeps_every_row_and_clears_the_leases_of_the_run_that_wrote_them() {
        let conn = at_version(7);
        conn.execute_batch(
            "INSERT INTO events (source, delivery_id, event_type, order_key, received_at, origin,
                                 content_type, headers, body, state, attempts, next_attempt_at,
                                 lease_until, last_error, delivered_at)
             VALUES ('s', 'p', 'push', 'A', 1, 'push', 'application/json', '{\"x-github-event\":\"push\"}',
                     x'7b7d', 'pending', 2, 5, NULL, 'HTTP 503', NULL),
                    ('s', 'l', NULL, 'A', 2, 'push', NULL, '{}', x'00ff', 'pending', 1, NULL, 99, NULL, NULL),
                    ('s', 'd', NULL, NULL, 3, 'fetched', NULL, '{}', x'01', 'delivered', 1, NULL, NULL, NULL, 7),
                    ('t', 'x', NULL, NULL, 4, 'push', NULL, '{}', NULL, 'dead', 12, NULL, NULL, 'gone', NULL),
                    ('u', 'st', NULL, NULL, 5, 'push', NULL, '{}', x'', 'stored', 0, NULL, NULL, NULL, NULL);
             INSERT INTO attempts (event_id, attempt, started_at, duration_ms, outcome, status_code, error)
             VALUES (1, 1, 2, 3, 'retry', 503, 'HTTP 503'), (3, 1, 4, 5, 'delivered', 204, NULL);
             INSERT INTO meta (key, value) VALUES ('heartbeat', '42');",
        )
        .unwrap();
        let tables = [
            "events",
            "attempts",
            "meta",
            "catchup_state",
            "catchup_runs",
            "redelivery_requests",
            "job_locks",
            "ip_sets",
        ];
        let mut before: Vec<_> = tables.iter().map(|t| rows_of(&conn, t)).collect();
        conn.execute_batch(MIGRATIONS[6]).unwrap();
        let after: Vec<_> = tables.iter().map(|t| rows_of(&conn, t)).collect();
        // The one change: the lease a dead run left (its attempt already
        // counted, as version 6 counted it at the claim) is gone.
        let lease_until = 13;
        assert_eq!(before[0][1][lease_until], Some("99".into()));
        before[0][1][lease_until] = None;
        assert_eq!(before, after);
        assert_eq!(after[0].len(), 5);
        let leases: i64 = conn
            .query_row("SELECT count(*) FROM leases", [], |r| r.get(0))
            .unwrap();
        assert_eq!(leases, 0);
    }

    /// A `deliveries` row, less its id.
    type DeliveryRow = (
        i64,
        String,
        String,
        Option<String>,
        String,
        i64,
        Option<i64>,
        Option<String>,
        Option<i64>,
    );

    #[test]
    fn version_9_gives_every_dispatched_event_a_default_delivery_as_it_stood() {
        let mut conn = at_version(8);
        conn.execute_batch(
            "INSERT INTO events (id, source, delivery_id, order_key, received_at, body, state,
                                 attempts, next_attempt_at, last_error, delivered_at)
             VALUES (1, 's', 'retrying', 'A', 1, x'01', 'pending', 2, 50, 'HTTP 503', NULL),
                    (2, 's', 'held', 'A', 2, x'02', 'pending', 0, NULL, NULL, NULL),
                    (3, 's', 'leased', NULL, 3, x'03', 'pending', 1, 3, NULL, NULL),
                    (4, 's', 'delivered', NULL, 4, NULL, 'delivered', 1, NULL, NULL, 7),
                    (5, 't', 'dead', NULL, 5, x'05', 'dead', 12, NULL, 'gone', NULL),
                    (6, 'u', 'stored', NULL, 6, x'06', 'stored', 0, NULL, NULL, NULL);
             INSERT INTO leases (event_id, source, order_key, attempt, lease_until)
             VALUES (3, 's', NULL, 2, 99);
             INSERT INTO attempts (event_id, attempt, started_at, duration_ms, outcome, status_code, error)
             VALUES (1, 1, 2, 3, 'retry', 503, 'HTTP 503');",
        )
        .unwrap();
        let events_before = rows_of(&conn, "events");
        apply(&mut conn).unwrap();
        assert_eq!(
            rows_of(&conn, "events"),
            events_before,
            "events are untouched"
        );
        let deliveries: Vec<DeliveryRow> = conn
            .prepare(
                "SELECT event_id, source, destination, order_key, state, attempts, next_attempt_at,
                        last_error, delivered_at FROM deliveries ORDER BY event_id",
            )
            .unwrap()
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                    r.get(8)?,
                ))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let d = |id,
                 src: &str,
                 key: Option<&str>,
                 state: &str,
                 attempts,
                 next,
                 error: Option<&str>,
                 at| {
            (
                id,
                src.to_owned(),
                "default".to_owned(),
                key.map(str::to_owned),
                state.to_owned(),
                attempts,
                next,
                error.map(str::to_owned),
                at,
            )
        };
        assert_eq!(
            deliveries,
            vec![
                d(
                    1,
                    "s",
                    Some("A"),
                    "pending",
                    2,
                    Some(50),
                    Some("HTTP 503"),
                    None
                ),
                d(2, "s", Some("A"), "pending", 0, None, None, None),
                // The attempt the dead run's lease made counts.
                d(3, "s", None, "pending", 2, Some(3), None, None),
                d(4, "s", None, "delivered", 1, None, None, Some(7)),
                d(5, "t", None, "dead", 12, None, Some("gone"), None),
            ]
        );
        let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(count("SELECT count(*) FROM leases"), 0);
        assert_eq!(
            count("SELECT count(*) FROM attempts WHERE destination = 'default'"),
            1
        );
    }

    #[test]
    fn version_11_counts_the_last_30_days_of_events_and_attempts_per_source_and_hour() {
        let mut conn = at_version(10);
        let now = crate::support::clock::now_ms();
        let hour = crate::store::counters::hour_of(now) - 5 * crate::store::counters::HOUR_MS;
        let old = now - 31 * 24 * crate::store::counters::HOUR_MS;
        conn.execute_batch(&format!(
            "INSERT INTO events (id, source, delivery_id, received_at, state)
             VALUES (1, 's', 'a', {hour} + 1, 'delivered'), (2, 's', 'b', {hour} + 2, 'dead'),
                    (3, 't', 'c', {hour} + 3, 'stored'), (4, 's', 'old', {old}, 'delivered');
             INSERT INTO attempts (event_id, attempt, started_at, duration_ms, outcome, destination)
             VALUES (1, 1, {hour} + 10, 5, 'retry', 'x'), (1, 2, {hour} + 20, 5, 'delivered', 'x'),
                    (1, 1, {hour} + 20, 5, 'delivered', 'y'),
                    (2, 1, {hour} + 30, 5, 'retry', 'x'),
                    -- ended in the next hour, counted there
                    (2, 2, {hour} + 3599990, 20, 'dead', 'x'),
                    (4, 1, {old}, 1, 'delivered', 'x');"
        ))
        .unwrap();
        apply(&mut conn).unwrap();
        let rows: Vec<(String, i64, i64, i64, i64)> = conn
            .prepare("SELECT * FROM hourly_counts ORDER BY source, hour")
            .unwrap()
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let next = hour + crate::store::counters::HOUR_MS;
        assert_eq!(
            rows,
            [
                ("s".into(), hour, 2, 2, 2),
                ("s".into(), next, 0, 0, 1),
                ("t".into(), hour, 1, 0, 0),
            ]
        );
    }

    #[test]
    fn version_18_keeps_the_catchup_runs_of_version_17_and_ledgers_new_passes() {
        let mut conn = at_version(17);
        conn.execute_batch(
            "INSERT INTO catchup_runs (id, source, job, started_at, finished_at, seen, asked, complete)
             VALUES (1, 'sq', 'stripe_backfill', 1, 2, 30, 3, 1);
             INSERT INTO redelivery_requests (run_id, source, guid, attempt_id, requested_at, outcome)
             VALUES (1, 'sq', 'a', 10, 1, 'asked');",
        )
        .unwrap();
        apply(&mut conn).unwrap();
        let count = |conn: &Connection, sql: &str| -> i64 {
            conn.query_row(sql, [], |r| r.get(0)).unwrap()
        };
        assert_eq!(count(&conn, "SELECT count(*) FROM catchup_runs"), 1);
        assert_eq!(count(&conn, "SELECT count(*) FROM redelivery_requests"), 1);
        assert_eq!(
            count(&conn, "SELECT count(*) FROM catchup_ledger"),
            0,
            "a pass before the ledger has no entry: nothing is made up"
        );
        conn.execute_batch(
            "PRAGMA foreign_keys = ON;
             INSERT INTO catchup_runs (id, source, job, started_at) VALUES (2, 'sq', 'square_backfill', 5);
             INSERT INTO catchup_ledger (run_id, source, job, window_end, listed, held, recovered,
                 pending, missing, outside_window, refused, rate_limited, provider_error)
             VALUES (2, 'sq', 'square_backfill', 5, 25, 17, 8, 0, 0, 0, 0, 0, 0);",
        )
        .unwrap();
        let summary = crate::store::ledger::summary(&conn, "sq", 0).unwrap();
        assert_eq!((summary.listed, summary.recovered), (25, 8));
        conn.execute_batch("DELETE FROM catchup_runs WHERE id = 2")
            .unwrap();
        assert_eq!(
            count(&conn, "SELECT count(*) FROM catchup_ledger"),
            0,
            "pruned with its run"
        );
    }

    #[test]
    fn version_7_keeps_every_catchup_run_and_request() {
        let mut conn = at_version(6);
        conn.execute_batch(
            "INSERT INTO catchup_runs (id, source, job, started_at, finished_at)
             VALUES (1, 'g', 'github_redelivery', 1, 2), (2, 'g', 'github_redelivery', 3, NULL);
             INSERT INTO redelivery_requests (run_id, source, guid, attempt_id, requested_at, outcome)
             VALUES (1, 'g', 'a', 10, 1, 'asked'), (1, 'g', 'b', 11, 1, 'failed');",
        )
        .unwrap();
        apply(&mut conn).unwrap();
        let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(count("SELECT count(*) FROM catchup_runs"), 2);
        assert_eq!(count("SELECT count(*) FROM redelivery_requests"), 2);
        assert_eq!(count("SELECT count(*) FROM catchup_pruned"), 0);
    }

    /// Whether inserting a row into `table` builds a temporary b-tree, as
    /// an `IN (...)` CHECK of three or more values makes SQLite do. EXPLAIN
    /// compiles against the schema the connection holds, so a statement
    /// runs first: that is when a connection finds the schema changed.
    fn insert_builds_a_btree(conn: &Connection, table: &str) -> bool {
        conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| {
            r.get::<_, i64>(0)
        })
        .unwrap();
        let sql = match table {
            "events" => {
                "EXPLAIN INSERT INTO events (source, delivery_id, received_at, state)
                         VALUES ('s', 'd', 1, 'pending')"
            }
            _ => {
                "EXPLAIN INSERT INTO deliveries (event_id, source, destination, state)
                  VALUES (1, 's', 'default', 'pending')"
            }
        };
        let ops: Vec<String> = conn
            .prepare(sql)
            .unwrap()
            .query_map([], |r| r.get(1))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        ops.iter().any(|op| op == "OpenEphemeral")
    }

    #[test]
    fn version_17_keeps_each_lease_left_by_version_16_and_gives_it_a_secret() {
        let mut conn = at_version(16);
        // What a version-16 hookbox left when it stopped mid-attempt.
        conn.execute_batch(
            "INSERT INTO events (source, delivery_id, received_at, body, state)
                 VALUES ('s', 'a', 1, x'7b7d', 'pending');
             INSERT INTO deliveries (event_id, source, destination, state, next_attempt_at)
                 VALUES (1, 's', 'd', 'pending', 1);
             INSERT INTO leases (token, delivery, source, destination, attempt, lease_until)
                 VALUES (7, 1, 's', 'd', 2, 5000);",
        )
        .unwrap();
        apply(&mut conn).unwrap();
        let (token, attempt, until, secret): (i64, i64, i64, Vec<u8>) = conn
            .query_row(
                "SELECT token, attempt, lease_until, secret FROM leases WHERE delivery = 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
        assert_eq!((token, attempt, until), (7, 2, 5000));
        assert_eq!(secret.len(), 16);
        // A claim after the upgrade never gets a token the old lease had.
        conn.execute_batch(
            "DELETE FROM leases;
             INSERT INTO leases (delivery, source, destination, attempt, lease_until, secret)
                 VALUES (1, 's', 'd', 3, 6000, randomblob(16));",
        )
        .unwrap();
        let next: i64 = conn
            .query_row("SELECT token FROM leases", [], |r| r.get(0))
            .unwrap();
        assert!(next > 7, "token {next} again");
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
    }

    #[test]
    fn version_16_checks_states_without_a_btree_and_every_connection_sees_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v15.db");
        let mut conn = Connection::open(&path).unwrap();
        conn.execute_batch(V1).unwrap();
        for sql in &MIGRATIONS[..14] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 15).unwrap();
        conn.execute_batch(
            "INSERT INTO events (id, source, delivery_id, received_at, state)
             VALUES (1, 's', 'a', 1, 'pending'), (2, 's', 'b', 2, 'stored');
             INSERT INTO deliveries (event_id, source, destination, state)
             VALUES (1, 's', 'default', 'pending');",
        )
        .unwrap();
        // A second connection that read the version 15 schema, as a pooled
        // reader or a CLI command would have.
        let other = Connection::open(&path).unwrap();
        assert!(insert_builds_a_btree(&other, "events"));
        assert!(insert_builds_a_btree(&other, "deliveries"));

        apply(&mut conn).unwrap();

        for c in [&conn, &other] {
            assert!(!insert_builds_a_btree(c, "events"));
            assert!(!insert_builds_a_btree(c, "deliveries"));
        }
        let mut new = Connection::open_in_memory().unwrap();
        apply(&mut new).unwrap();
        assert!(!insert_builds_a_btree(&new, "events"));
        assert!(!insert_builds_a_btree(&new, "deliveries"));
        // The same states pass and the same are refused.
        for c in [&conn, &new] {
            c.execute(
                "INSERT INTO events (id, source, delivery_id, received_at, state)
                 VALUES (3, 's', 'c', 3, 'delivered')",
                [],
            )
            .unwrap();
            let bad = c
                .execute("UPDATE events SET state = 'sent' WHERE id = 3", [])
                .unwrap_err()
                .to_string();
            assert!(bad.contains("CHECK constraint failed"), "{bad}");
            c.execute(
                "INSERT INTO deliveries (event_id, source, destination, state)
                 VALUES (3, 's', 'default', 'dead')",
                [],
            )
            .unwrap();
            let bad = c
                .execute(
                    "UPDATE deliveries SET state = 'stored' WHERE event_id = 3",
                    [],
                )
                .unwrap_err()
                .to_string();
            assert!(bad.contains("CHECK constraint failed"), "{bad}");
        }
        let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(count("SELECT count(*) FROM events"), 3);
        assert_eq!(count("PRAGMA user_version"), SCHEMA_VERSION);
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
    }

    #[test]
    fn version_20_takes_the_search_index_out_of_the_database_and_keeps_every_event() {
        let mut conn = at_version(19);
        // As version 19's writer left it: two events indexed, the mark.
        conn.execute_batch(
            "INSERT INTO events (id, source, delivery_id, received_at, body, state)
             VALUES (1, 's', 'a', 1, 'alpha', 'stored'), (2, 's', 'b', 2, 'bravo', 'stored');
             INSERT INTO events_fts (rowid, body) VALUES (1, 'alpha'), (2, 'bravo');
             INSERT INTO meta (key, value) VALUES ('search_indexed_through', '2');",
        )
        .unwrap();
        apply(&mut conn).unwrap();
        let left: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name LIKE 'events_fts%'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(
            left, 0,
            "the index, its shadow tables and triggers are gone"
        );
        let marks: i64 = conn
            .query_row(
                "SELECT count(*) FROM meta WHERE key = 'search_indexed_through'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(marks, 0, "the mark went with it");
        // Events delete and lose bodies without the triggers.
        conn.execute_batch("DELETE FROM events WHERE id = 1; UPDATE events SET body = NULL;")
            .unwrap();
        assert_eq!(rows_of(&conn, "events").len(), 1);
    }

    #[test]
    fn version_19_takes_skipped_deliveries_on_a_database_version_18_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v18.db");
        let mut conn = Connection::open(&path).unwrap();
        conn.execute_batch(V1).unwrap();
        for sql in &MIGRATIONS[..17] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 18).unwrap();
        conn.execute_batch(
            "INSERT INTO events (id, source, delivery_id, received_at, state)
             VALUES (1, 's', 'a', 1, 'pending'), (2, 's', 'b', 2, 'dead');
             INSERT INTO deliveries (event_id, source, destination, state)
             VALUES (1, 's', 'chat', 'pending'), (2, 's', 'chat', 'dead');",
        )
        .unwrap();
        // Version 18 refuses the state; a reader opened now keeps its
        // schema until told to read it again.
        let skip = |c: &Connection| {
            c.execute(
                "UPDATE deliveries SET state = 'skipped' WHERE event_id = 1",
                [],
            )
            .and_then(|_| c.execute("UPDATE events SET state = 'skipped' WHERE id = 1", []))
        };
        assert!(skip(&conn).unwrap_err().to_string().contains("CHECK"));
        let other = Connection::open(&path).unwrap();

        apply(&mut conn).unwrap();

        skip(&other).unwrap();
        let rows: Vec<(i64, String)> = conn
            .prepare("SELECT event_id, state FROM deliveries ORDER BY event_id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(rows, [(1, "skipped".into()), (2, "dead".into())]);
        let bad = conn
            .execute(
                "UPDATE deliveries SET state = 'sent' WHERE event_id = 2",
                [],
            )
            .unwrap_err();
        assert!(bad.to_string().contains("CHECK constraint failed"), "{bad}");
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
    }

    #[test]
    fn applying_twice_is_harmless_and_a_newer_database_is_refused() {
        let mut conn = Connection::open_in_memory().unwrap();
        apply(&mut conn).unwrap();
        apply(&mut conn).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        let err = apply(&mut conn).unwrap_err().to_string();
        assert!(err.contains("newer than this hookbox"), "{err}");
    }
}
