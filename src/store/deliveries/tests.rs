use super::*;
use crate::store::counters::Tally;
use crate::store::outcomes::{JOIN, STATE};
use crate::store::replay::{ReplayFilter, replay};
use crate::store::test_support::db;

/// The one lane these tests use: destination `d` of source `s`.
const DEST: &str = "d";

fn claim(
    conn: &Connection,
    source: &str,
    limit: usize,
    now: i64,
    lease_until: i64,
) -> anyhow::Result<Vec<Claimed>> {
    let from = lane_of(source, limit);
    // As the writer's claim does: leases that ran out are attempts first.
    super::expire(conn, &from, now, &mut Tally::default())?;
    super::claim(conn, &from, now, lease_until)
}

/// Attempts the tests' lanes allow.
const MAX_ATTEMPTS: u32 = 3;

/// The tests' lane: a failed attempt is retried at once, until the
/// [`MAX_ATTEMPTS`]th, which is dead.
fn lane_of(source: &str, limit: usize) -> ClaimFrom {
    ClaimFrom {
        lane: 0,
        source: source.to_owned(),
        destination: DEST.to_owned(),
        limit,
        max_delay_ms: i64::MAX,
        ahead: false,
        bodies: 0,
        on_failure: OnFailure(Arc::new(|attempt, _interrupted, now| {
            if attempt >= MAX_ATTEMPTS {
                Settled::Dead
            } else {
                Settled::Retry(now)
            }
        })),
    }
}

/// The event's attempts as the log keeps them: number, outcome, error.
fn attempts_of(conn: &Connection, id: i64) -> Vec<(u32, String, Option<String>)> {
    conn.prepare("SELECT attempt, outcome, error FROM attempts WHERE event_id = ?1 ORDER BY id")
        .unwrap()
        .query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn a_lease_that_runs_out_is_a_failed_attempt_and_the_last_one_is_dead() {
    let conn = db();
    let id = add(&conn, "x", None, 10);
    let mut at = 10;
    for attempt in 1..=MAX_ATTEMPTS {
        let claimed = claim(&conn, "s", 1, at, at + 40).unwrap();
        assert_eq!(claimed[0].attempt, attempt);
        // Nobody settles it: it runs out.
        at += 40;
    }
    assert!(claim(&conn, "s", 1, at, at + 40).unwrap().is_empty());
    let expired = || Some(LEASE_EXPIRED.to_owned());
    assert_eq!(
        attempts_of(&conn, id),
        [
            (1, "retry".to_owned(), expired()),
            (2, "retry".to_owned(), expired()),
            (3, "dead".to_owned(), expired()),
        ]
    );
    let (state, attempts, _) = state_of(&conn, id);
    assert_eq!((state.as_str(), attempts), ("dead", 3));
    let leases: i64 = conn
        .query_row("SELECT count(*) FROM leases", [], |r| r.get(0))
        .unwrap();
    assert_eq!(leases, 0);
}

#[test]
fn a_lease_still_running_is_not_expired_and_counts_as_the_next_end() {
    let conn = db();
    add(&conn, "x", None, 10);
    claim(&conn, "s", 1, 10, 50).unwrap();
    assert!(claim(&conn, "s", 1, 49, 100).unwrap().is_empty());
    assert_eq!(next_lease_end(&conn, "s", DEST, 49).unwrap(), Some(50));
    // Ran out: no longer a time to look again at (a waiting take would
    // spin on it), and the next claim records it.
    assert_eq!(next_lease_end(&conn, "s", DEST, 50).unwrap(), None);
}

#[test]
fn a_lease_left_by_a_stop_is_an_interrupted_attempt_due_again_at_once() {
    let conn = db();
    let id = add(&conn, "x", None, 10);
    claim(&conn, "s", 1, 10, 1_000_000).unwrap();
    assert_eq!(interrupt_all(&conn).unwrap(), 1);
    let again = claim(&conn, "s", 1, 20, 60).unwrap();
    assert_eq!((again[0].event_id, again[0].attempt), (id, 2));
    assert_eq!(
        attempts_of(&conn, id),
        [(1, "retry".to_owned(), Some(INTERRUPTED.to_owned()))]
    );
}

fn next_due(conn: &Connection, source: &str, now: i64) -> anyhow::Result<Option<i64>> {
    super::next_due(conn, source, DEST, now)
}

fn clamp_retries(conn: &Connection, source: &str, now: i64, max: i64) -> anyhow::Result<usize> {
    super::clamp_retries(conn, source, DEST, now, max)
}

fn clamp_leases(conn: &Connection, source: &str, until: i64) -> anyhow::Result<usize> {
    super::clamp_leases(conn, source, DEST, until)
}

/// The event's lease.
fn lease_of(conn: &Connection, id: i64) -> Lease {
    conn.query_row(
        "SELECT l.delivery, l.token FROM leases AS l JOIN deliveries AS d ON d.id = l.delivery
         WHERE d.event_id = ?1",
        [id],
        |r| {
            Ok(Lease {
                delivery: r.get(0)?,
                token: r.get(1)?,
            })
        },
    )
    .unwrap()
}

fn add(conn: &Connection, delivery: &str, key: Option<&str>, due: i64) -> i64 {
    conn.execute(
        "INSERT INTO events (source, delivery_id, order_key, received_at, body, state)
         VALUES ('s', ?1, ?2, ?3, x'7b7d', 'pending')",
        params![delivery, key, due],
    )
    .unwrap();
    let id = conn.last_insert_rowid();
    conn.execute(
        "INSERT INTO deliveries (event_id, source, destination, order_key, state, next_attempt_at)
         VALUES (?1, 's', 'd', ?2, 'pending', ?3)",
        params![id, key, due],
    )
    .unwrap();
    id
}

/// Sets every event and delivery to `state`, as settling would.
fn set_all(conn: &Connection, state: &str) {
    conn.execute("UPDATE events SET state = ?1", [state])
        .unwrap();
    conn.execute("UPDATE deliveries SET state = ?1", [state])
        .unwrap();
}

fn ids(claimed: &[Claimed]) -> Vec<i64> {
    claimed.iter().map(|c| c.event_id).collect()
}

#[test]
fn after_the_clock_went_back_retries_and_leases_come_within_reach() {
    const JUMP: i64 = 3 * 3_600_000;
    let conn = db();
    // Scheduled under a clock 3 h ahead: a retry due 10 min later, and
    // a lease of 1 min.
    let waiting = add(&conn, "w", None, JUMP + 600_000);
    let leased = add(&conn, "l", None, 0);
    assert_eq!(
        ids(&claim(&conn, "s", 1, JUMP, JUMP + 60_000).unwrap()),
        vec![leased]
    );
    // The clock now reads 0.
    assert!(claim(&conn, "s", 10, 600_000, 660_000).unwrap().is_empty());
    assert_eq!(clamp_retries(&conn, "s", 0, 600_000).unwrap(), 1);
    assert_eq!(clamp_leases(&conn, "s", 60_000).unwrap(), 1);
    // Due at the cap, leased no longer than a lease granted now (and that
    // lease, run out, is a failed attempt retried now).
    let mut within_reach = ids(&claim(&conn, "s", 10, 600_000, 660_000).unwrap());
    within_reach.sort_unstable();
    assert_eq!(within_reach, vec![waiting, leased]);
    // Nothing scheduled within reach is touched.
    assert_eq!(clamp_retries(&conn, "s", 600_000, 600_000).unwrap(), 0);
}

#[test]
fn events_sharing_a_key_go_one_at_a_time_in_arrival_order() {
    let conn = db();
    let a1 = add(&conn, "a1", Some("A"), 10);
    let a2 = add(&conn, "a2", Some("A"), 10);
    let b1 = add(&conn, "b1", Some("B"), 10);
    let free = add(&conn, "n", None, 10);
    assert_eq!(
        ids(&claim(&conn, "s", 10, 100, 1000).unwrap()),
        vec![a1, b1, free]
    );
    // a1 is leased: a2 waits, and nothing else is due.
    assert!(claim(&conn, "s", 10, 100, 1000).unwrap().is_empty());
    // a1 fails and waits for its retry: a2 is still held back.
    let retry = AttemptRecord {
        lease: lease_of(&conn, a1),
        event_id: a1,
        source: "s".into(),
        destination: DEST.into(),
        attempt: 1,
        started_at: 100,
        duration_ms: 1,
        settled: Settled::Retry(500),
        status: Some(503),
        error: None,
        counted: true,
    };
    record(&conn, &retry, 100).unwrap();
    assert!(claim(&conn, "s", 10, 200, 1000).unwrap().is_empty());
    assert_eq!(next_due(&conn, "s", 200).unwrap(), Some(500));
    // a1 dies: it no longer holds a2 back.
    assert_eq!(ids(&claim(&conn, "s", 10, 500, 1000).unwrap()), vec![a1]);
    let dead = AttemptRecord {
        lease: lease_of(&conn, a1),
        attempt: 2,
        settled: Settled::Dead,
        ..retry
    };
    record(&conn, &dead, 500).unwrap();
    assert_eq!(ids(&claim(&conn, "s", 10, 500, 1000).unwrap()), vec![a2]);
}

/// Stores an event as ingest does.
fn ingest(conn: &mut Connection, delivery: &str, key: Option<&str>, at: i64) -> i64 {
    use super::super::models::{Inserted, NewEvent, Origin};
    let tx = conn.transaction().unwrap();
    let event = NewEvent {
        source: "s".into(),
        delivery_id: delivery.into(),
        event_type: None,
        order_key: key.map(str::to_owned),
        received_at: at,
        origin: Origin::Push,
        content_type: None,
        headers: "{}".into(),
        body: bytes::Bytes::from_static(b"{}"),
        destinations: vec![DEST.into()],
    };
    let Inserted::New(id) = super::super::ingest::insert(&tx, &event).unwrap() else {
        panic!("{delivery} was a duplicate");
    };
    tx.commit().unwrap();
    id
}

/// SQLite's plan for the claim query, one step per line.
fn claim_plan(conn: &Connection) -> String {
    conn.prepare(&format!("EXPLAIN QUERY PLAN {}", claimable(false)))
        .unwrap()
        .query_map(params!["s", DEST, 0, 4, 1], |r| r.get::<_, String>(3))
        .unwrap()
        .map(Result::unwrap)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The events that have a time, in id order.
fn scheduled(conn: &Connection) -> Vec<i64> {
    conn.prepare(
        "SELECT event_id FROM deliveries WHERE state = 'pending' AND next_attempt_at IS NOT NULL
         ORDER BY event_id",
    )
    .unwrap()
    .query_map([], |r| r.get(0))
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

/// Records the outcome of the event's claim.
fn settle(conn: &Connection, id: i64, attempt: u32, settled: Settled, now: i64) {
    let r = AttemptRecord {
        lease: lease_of(conn, id),
        event_id: id,
        source: "s".into(),
        destination: DEST.into(),
        attempt,
        started_at: now,
        duration_ms: 1,
        settled,
        status: None,
        error: None,
        counted: true,
    };
    record(conn, &r, now).unwrap();
}

#[test]
fn only_the_oldest_pending_event_of_a_key_is_scheduled() {
    let mut conn = db();
    let a1 = ingest(&mut conn, "a1", Some("A"), 10);
    let a2 = ingest(&mut conn, "a2", Some("A"), 11);
    let a3 = ingest(&mut conn, "a3", Some("A"), 12);
    let b1 = ingest(&mut conn, "b1", Some("B"), 13);
    let free = ingest(&mut conn, "n", None, 14);
    assert_eq!(scheduled(&conn), vec![a1, b1, free]);
    // A retry keeps a1 ahead; a2 and a3 stay held.
    assert_eq!(
        ids(&claim(&conn, "s", 10, 100, 1000).unwrap()),
        vec![a1, b1, free]
    );
    settle(&conn, a1, 1, Settled::Retry(500), 100);
    assert_eq!(scheduled(&conn), vec![a1, b1, free]);
    // a1 delivered: a2 is due at once, a3 still held.
    assert_eq!(ids(&claim(&conn, "s", 10, 500, 1000).unwrap()), vec![a1]);
    settle(&conn, a1, 2, Settled::Delivered, 600);
    assert_eq!(scheduled(&conn), vec![a2, b1, free]);
    assert_eq!(ids(&claim(&conn, "s", 10, 600, 1000).unwrap()), vec![a2]);
    // Shut down mid-attempt: a2 given back, still the scheduled one.
    release(&conn, &[lease_of(&conn, a2)]).unwrap();
    assert_eq!(scheduled(&conn), vec![a2, b1, free]);
    // a2 dead: a3 next.
    assert_eq!(ids(&claim(&conn, "s", 10, 700, 2000).unwrap()), vec![a2]);
    settle(&conn, a2, 1, Settled::Dead, 800);
    assert_eq!(scheduled(&conn), vec![a3, b1, free]);
    // a2 replayed: older than a3, so a3 is held again behind it.
    let filter = ReplayFilter {
        id: Some(a2),
        ..ReplayFilter::default()
    };
    assert_eq!(replay(&conn, &filter, 900).unwrap(), 1);
    assert_eq!(scheduled(&conn), vec![a2, b1, free]);
    // (b1 and the free event are still leased by the first claim.)
    assert_eq!(ids(&claim(&conn, "s", 10, 900, 3000).unwrap()), vec![a2]);
}

#[test]
fn an_event_let_through_is_due_from_its_arrival_not_behind_later_ones() {
    let mut conn = db();
    let k1 = ingest(&mut conn, "k1", Some("K"), 0);
    let k2 = ingest(&mut conn, "k2", Some("K"), 0);
    for n in 1..=20 {
        ingest(&mut conn, &format!("free{n}"), None, n);
    }
    assert_eq!(ids(&claim(&conn, "s", 1, 100, 200).unwrap()), vec![k1]);
    settle(&conn, k1, 1, Settled::Delivered, 1_000);
    assert_eq!(ids(&claim(&conn, "s", 1, 1_000, 2_000).unwrap()), vec![k2]);
}

#[test]
fn a_replay_ahead_of_a_waiting_retry_keeps_the_retry_s_time() {
    let mut conn = db();
    let a1 = ingest(&mut conn, "a1", Some("A"), 10);
    let a2 = ingest(&mut conn, "a2", Some("A"), 11);
    claim(&conn, "s", 1, 100, 200).unwrap();
    settle(&conn, a1, 1, Settled::Dead, 100);
    assert_eq!(ids(&claim(&conn, "s", 1, 100, 200).unwrap()), vec![a2]);
    // a2 asked for an hour (Retry-After).
    settle(&conn, a2, 1, Settled::Retry(3_600_100), 150);
    let filter = ReplayFilter {
        id: Some(a1),
        ..ReplayFilter::default()
    };
    assert_eq!(replay(&conn, &filter, 200).unwrap(), 1);
    assert_eq!(scheduled(&conn), vec![a1, a2]);
    assert_eq!(ids(&claim(&conn, "s", 10, 200, 300).unwrap()), vec![a1]);
    settle(&conn, a1, 1, Settled::Delivered, 250);
    // a1 is done, yet a2 still waits out its hour.
    assert!(claim(&conn, "s", 10, 300, 400).unwrap().is_empty());
    assert_eq!(next_due(&conn, "s", 300).unwrap(), Some(3_600_100));
}

#[test]
fn a_claim_does_not_walk_a_key_s_backlog() {
    let mut conn = db();
    for n in 0..2_000 {
        ingest(&mut conn, &format!("k{n}"), Some("K"), n);
    }
    let free = ingest(&mut conn, "free", None, 5_000);
    assert_eq!(scheduled(&conn).len(), 2);
    let plan = claim_plan(&conn);
    assert!(plan.contains("next_attempt_at<?"), "{plan}");
    let claimed = claim(&conn, "s", 4, 10_000, 20_000).unwrap();
    assert_eq!(claimed.len(), 2);
    assert_eq!(claimed[1].event_id, free);
}

#[test]
fn a_replayed_event_waits_for_the_event_of_its_key_in_flight_then_goes_first() {
    let conn = db();
    let a1 = add(&conn, "a1", Some("A"), 10);
    let a2 = add(&conn, "a2", Some("A"), 10);
    let a3 = add(&conn, "a3", Some("A"), 10);
    assert_eq!(ids(&claim(&conn, "s", 10, 100, 1000).unwrap()), vec![a1]);
    settle(&conn, a1, 1, Settled::Dead, 100);
    assert_eq!(ids(&claim(&conn, "s", 10, 100, 1000).unwrap()), vec![a2]);
    // a1 replayed while a2 is in flight: neither it nor a3 may go.
    let filter = ReplayFilter {
        id: Some(a1),
        ..ReplayFilter::default()
    };
    assert_eq!(replay(&conn, &filter, 200).unwrap(), 1);
    assert!(claim(&conn, "s", 10, 200, 1000).unwrap().is_empty());
    // The lease runs out (a crashed dispatcher): that attempt of a2
    // failed, and a1, being older, goes.
    assert_eq!(ids(&claim(&conn, "s", 10, 1000, 2000).unwrap()), vec![a1]);
    settle(&conn, a1, 1, Settled::Delivered, 1000);
    assert_eq!(ids(&claim(&conn, "s", 10, 1000, 2000).unwrap()), vec![a2]);
    settle(&conn, a2, 2, Settled::Delivered, 1000);
    assert_eq!(ids(&claim(&conn, "s", 10, 1000, 2000).unwrap()), vec![a3]);
}

#[test]
fn an_event_whose_body_retention_dropped_is_not_replayed() {
    let conn = db();
    let kept = add(&conn, "kept", None, 10);
    let emptied = add(&conn, "emptied", None, 10);
    set_all(&conn, "delivered");
    conn.execute("UPDATE events SET body = NULL WHERE id = ?1", [emptied])
        .unwrap();
    let filter = ReplayFilter::default();
    assert_eq!(replay(&conn, &filter, 100).unwrap(), 1);
    assert_eq!(ids(&claim(&conn, "s", 10, 100, 1000).unwrap()), vec![kept]);
}

#[test]
fn an_expired_lease_makes_the_event_due_again_and_replay_resets_it() {
    let conn = db();
    let id = add(&conn, "x", None, 10);
    assert_eq!(claim(&conn, "s", 1, 10, 50).unwrap()[0].attempt, 1);
    assert!(claim(&conn, "s", 1, 49, 100).unwrap().is_empty());
    assert_eq!(claim(&conn, "s", 1, 50, 100).unwrap()[0].attempt, 2);
    let dead = AttemptRecord {
        lease: lease_of(&conn, id),
        event_id: id,
        source: "s".into(),
        destination: DEST.into(),
        attempt: 2,
        started_at: 50,
        duration_ms: 1,
        settled: Settled::Dead,
        status: Some(410),
        error: Some("gone".into()),
        counted: true,
    };
    record(&conn, &dead, 60).unwrap();
    let filter = ReplayFilter {
        state: Some(State::Dead),
        ..ReplayFilter::default()
    };
    assert_eq!(replay(&conn, &filter, 70).unwrap(), 1);
    let again = claim(&conn, "s", 1, 70, 100).unwrap();
    assert_eq!((again[0].event_id, again[0].attempt), (id, 1));
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 1);
}

#[test]
fn replay_by_time_range_moves_only_events_received_in_it() {
    let conn = db();
    let ids: Vec<i64> = (0..4)
        .map(|i| add(&conn, &format!("t{i}"), None, i * 100))
        .collect();
    set_all(&conn, "dead");
    let filter = ReplayFilter {
        state: Some(State::Dead),
        since: Some(100),
        until: Some(300),
        ..ReplayFilter::default()
    };
    assert_eq!(replay(&conn, &filter, 1000).unwrap(), 2);
    let pending: Vec<i64> = conn
        .prepare(&format!(
            "SELECT e.id FROM events AS e {JOIN} WHERE {STATE} = 'pending' ORDER BY e.id"
        ))
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(pending, &ids[1..3]);
}

#[test]
fn the_claim_query_uses_the_indexes() {
    let plan = claim_plan(&db());
    assert!(plan.contains("USING INDEX deliveries_due"), "{plan}");
    assert!(
        plan.contains("USING COVERING INDEX deliveries_order")
            || plan.contains("USING INDEX deliveries_order"),
        "{plan}"
    );
    assert!(plan.contains("USING INDEX leases_key"), "{plan}");
    assert!(plan.contains("(delivery=?)"), "{plan}");
    assert!(
        plan.contains("USING INTEGER PRIMARY KEY (rowid=?)"),
        "{plan}"
    );
    assert!(!plan.contains("USE TEMP B-TREE"), "{plan}");
}

fn outcome(id: i64, lease: Lease, attempt: u32, settled: Settled) -> AttemptRecord {
    AttemptRecord {
        lease,
        event_id: id,
        source: "s".into(),
        destination: DEST.into(),
        attempt,
        started_at: 0,
        duration_ms: 1,
        settled,
        status: None,
        error: None,
        counted: true,
    }
}

/// The event's state, finished attempts and lease.
fn state_of(conn: &Connection, id: i64) -> (String, i64, Option<i64>) {
    conn.query_row(
        "SELECT state, attempts, (SELECT lease_until FROM leases WHERE delivery = d.id)
         FROM deliveries AS d WHERE event_id = ?1",
        [id],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
    .unwrap()
}

#[test]
fn a_late_result_of_an_old_claim_cannot_settle_a_newer_claim() {
    let conn = db();
    let id = add(&conn, "x", None, 10);
    // Claimed, then given back (shutdown): the attempt is not counted,
    // so the next claim's attempt is number 1 again.
    let old = claim(&conn, "s", 1, 10, 1_000).unwrap()[0].lease();
    release(&conn, &[old]).unwrap();
    let new = claim(&conn, "s", 1, 20, 1_000).unwrap();
    assert_eq!(
        new[0].attempt, 1,
        "the same attempt number as the old claim"
    );
    assert_ne!(new[0].token, old.token);
    // The old claim's result arrives: it moves nothing, not even the
    // lease of the claim running now.
    record(&conn, &outcome(id, old, 1, Settled::Delivered), 30).unwrap();
    assert_eq!(state_of(&conn, id), ("pending".into(), 0, Some(1_000)));
    // Nor can the old claim renew or give back the new claim's lease.
    assert_eq!(renew(&conn, &[old], 900, 5_000).unwrap(), 0);
    release(&conn, &[old]).unwrap();
    assert_eq!(state_of(&conn, id), ("pending".into(), 0, Some(1_000)));
    // The running claim's own result settles it.
    record(
        &conn,
        &outcome(id, new[0].lease(), 1, Settled::Retry(50)),
        40,
    )
    .unwrap();
    assert_eq!(state_of(&conn, id), ("pending".into(), 1, None));
    // A lease that ran out (a lost outcome) lets the event be claimed
    // again; the first claim's late result then settles nothing.
    let lost = claim(&conn, "s", 1, 50, 100).unwrap()[0].lease();
    let again = &claim(&conn, "s", 1, 100, 1_000).unwrap()[0];
    assert_eq!(again.attempt, 3, "the lost attempt counts");
    let again = again.lease();
    record(&conn, &outcome(id, lost, 2, Settled::Delivered), 110).unwrap();
    assert_eq!(state_of(&conn, id), ("pending".into(), 2, Some(1_000)));
    record(&conn, &outcome(id, again, 3, Settled::Dead), 120).unwrap();
    assert_eq!(state_of(&conn, id), ("dead".into(), 3, None));
    // Replay resets the count: a result of a claim from before it is
    // refused as well.
    let filter = ReplayFilter {
        id: Some(id),
        ..ReplayFilter::default()
    };
    assert_eq!(replay(&conn, &filter, 130).unwrap(), 1);
    let replayed = claim(&conn, "s", 1, 130, 1_000).unwrap()[0].lease();
    record(&conn, &outcome(id, again, 1, Settled::Delivered), 140).unwrap();
    assert_eq!(state_of(&conn, id), ("pending".into(), 0, Some(1_000)));
    record(&conn, &outcome(id, replayed, 1, Settled::Delivered), 150).unwrap();
    assert_eq!(state_of(&conn, id), ("delivered".into(), 1, None));
}

#[test]
fn a_renewed_lease_outlives_a_forward_clock_step_and_holds_its_key() {
    const STEP: i64 = 3 * 3_600_000;
    let conn = db();
    let a1 = add(&conn, "a1", Some("A"), 10);
    let a2 = add(&conn, "a2", Some("A"), 10);
    let held = claim(&conn, "s", 10, 100, 1_100).unwrap();
    assert_eq!(ids(&held), vec![a1]);
    let lease = held[0].lease();
    // Half the lease left: nothing to renew yet.
    assert_eq!(renew(&conn, &[lease], 600, 1_600).unwrap(), 0);
    // The wall clock steps 3 h forward while a1 runs: renewing first,
    // as every claim of the dispatcher does, keeps a1 held and a2 back.
    let later = STEP + 100;
    assert_eq!(renew(&conn, &[lease], later, later + 1_000).unwrap(), 1);
    assert!(
        claim(&conn, "s", 10, later, later + 1_000)
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        state_of(&conn, a1),
        ("pending".into(), 0, Some(later + 1_000))
    );
    // Without the renewal the step would have handed a1 out again.
    conn.execute("UPDATE leases SET lease_until = 1100", [])
        .unwrap();
    assert_eq!(
        ids(&claim(&conn, "s", 10, later, later + 1_000).unwrap()),
        vec![a1]
    );
    // A settled lease is not renewed back to life.
    let again = lease_of(&conn, a1);
    settle(&conn, a1, 2, Settled::Delivered, later);
    assert_eq!(renew(&conn, &[again], later, later + 5_000).unwrap(), 0);
    assert_eq!(state_of(&conn, a1), ("delivered".into(), 2, None));
    assert_eq!(
        ids(&claim(&conn, "s", 10, later, later + 1_000).unwrap()),
        vec![a2]
    );
}

#[test]
fn a_claim_carries_no_body_and_leaves_the_event_row_alone() {
    let conn = db();
    let id = add(&conn, "e", None, 10);
    conn.execute("UPDATE events SET body = zeroblob(100000)", [])
        .unwrap();
    let row = |conn: &Connection| -> Vec<u8> {
        conn.query_row(
            "SELECT state || attempts || coalesce(next_attempt_at, '') || hex(body)
             FROM events WHERE id = ?1",
            [id],
            |r| r.get::<_, String>(0),
        )
        .unwrap()
        .into_bytes()
    };
    let before = row(&conn);
    let claimed = claim(&conn, "s", 1, 100, 1_000).unwrap();
    assert_eq!(ids(&claimed), vec![id]);
    assert_eq!(row(&conn), before, "leasing does not touch the event");
    assert_eq!(body(&conn, id).unwrap(), Some(vec![0; 100_000]));
    assert_eq!(body(&conn, id + 1).unwrap(), None);
}

/// SQLite plans a statement with a bound `LIMIT` again each time the limit
/// is bound, unless told not to (`plan_once`): the claim runs for every
/// batch a dispatcher takes.
#[test]
fn a_claim_is_planned_once_however_many_times_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let conn = crate::store::open_writer_connection(&dir.path().join("hookbox.db")).unwrap();
    for (now, limit) in [(1_000, 1), (1_001, 5), (1_002, 10), (1_003, 5)] {
        claim(&conn, "s", limit, now, now + 60_000).unwrap();
    }
    let stmt = conn.prepare_cached(&claimable(false)).unwrap();
    assert_eq!(stmt.get_status(rusqlite::StatementStatus::RePrepare), 0);
}

#[test]
fn a_claim_carries_the_bodies_that_fit_its_budget_and_no_others() {
    let conn = db();
    let sizes = [3_000, 4_000, CARRIED_BODY_MAX as usize + 1, 2_000, 0];
    let ids: Vec<i64> = sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| {
            let id = add(&conn, &format!("e{i}"), None, 10 + i as i64);
            let body = (size > 0).then(|| vec![b'a' + i as u8; size]);
            conn.execute(
                "UPDATE events SET body = ?2 WHERE id = ?1",
                params![id, body],
            )
            .unwrap();
            id
        })
        .collect();
    let from = ClaimFrom {
        bodies: 5_500,
        ..lane_of("s", 10)
    };
    let claimed = super::claim(&conn, &from, 100, 1_000).unwrap();
    assert_eq!(claimed.iter().map(|c| c.event_id).collect::<Vec<_>>(), ids);
    let carried: Vec<Option<Vec<u8>>> = claimed
        .iter()
        .map(|c| c.body.as_ref().map(|b| b.0.clone()))
        .collect();
    assert_eq!(
        carried,
        vec![
            Some(vec![b'a'; 3_000]),
            // Past the budget, and past the largest a claim carries.
            None,
            None,
            Some(vec![b'd'; 2_000]),
            // A body retention dropped reads as empty, as `body` has it.
            Some(Vec::new()),
        ]
    );
    assert_eq!(
        claimed.iter().map(Claimed::carried_bytes).sum::<u64>(),
        5_000
    );
    // Without a budget, a claim carries none.
    set_all(&conn, "pending");
    conn.execute("DELETE FROM leases", []).unwrap();
    let bare = super::claim(&conn, &lane_of("s", 10), 2_000, 3_000).unwrap();
    assert_eq!(bare.len(), sizes.len());
    assert!(bare.iter().all(|c| c.body.is_none()));
}

#[test]
fn a_skip_is_final_uncounted_and_unlogged_and_lets_its_key_go_on() {
    let conn = db();
    let a1 = add(&conn, "a1", Some("A"), 10);
    let a2 = add(&conn, "a2", Some("A"), 10);
    assert_eq!(ids(&claim(&conn, "s", 10, 100, 1000).unwrap()), vec![a1]);
    settle(&conn, a1, 1, Settled::Skipped, 100);
    assert_eq!(state_of(&conn, a1), ("skipped".into(), 0, None));
    let event: String = conn
        .query_row(
            &format!("SELECT {STATE} FROM events AS e {JOIN} WHERE e.id = ?1"),
            [a1],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(event, "skipped", "every delivery of it skipped");
    let rows: i64 = conn
        .query_row(
            "SELECT count(*) FROM attempts WHERE event_id = ?1",
            [a1],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(rows, 0, "no attempt was made");
    assert_eq!(ids(&claim(&conn, "s", 10, 100, 1000).unwrap()), vec![a2]);
}
