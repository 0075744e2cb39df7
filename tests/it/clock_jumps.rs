//! Wall-clock jumps and the retry schedule. hookbox stores when a retry is
//! due (`next_attempt_at`) and until when a claim holds (`lease_until`) as
//! wall-clock unix ms, and compares them with the wall clock when it
//! claims. A test cannot move the system clock, but moving every stored
//! time by `-J` is, to the server, the same as its clock jumping forward
//! by `J` (and `+J` the same as a jump back). The signature tolerance
//! under clock skew is in `faults.rs`.

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

use hookbox::store::dispatch::{claim, next_due};

use crate::deliver::*;
use crate::helpers::*;

const HOUR_MS: i64 = 3_600_000;
/// How far the clock jumps in these tests.
const JUMP_MS: i64 = 3 * HOUR_MS;

/// Shifts every stored time of the events by `delta_ms` (so `-J` reads,
/// to the server, as its clock jumping forward by `J`).
fn shift_stored_times(db: &Path, delta_ms: i64) {
    let conn = Connection::open(db).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn.execute(
        "UPDATE events SET received_at = received_at + ?1,
                           next_attempt_at = next_attempt_at + ?1,
                           lease_until = lease_until + ?1",
        [delta_ms],
    )
    .unwrap();
}

/// Posts one event to a downstream that refuses its first attempt with
/// `Retry-After: 600` (backoff 10 min, so the retry is due in exactly ten
/// minutes), and waits for that failure to be recorded.
async fn event_waiting_for_its_retry(
    down: &Downstream,
    backoff: &str,
) -> (TestApp, String, i64, EventRow) {
    let sources = deliver_source_backoff(
        "github",
        &url_destination(&down.url()),
        "2s",
        5,
        backoff,
        backoff,
    );
    let app = TestApp::spawn(&sources).await;
    let id = post_event(app.addr, "github", "waiting", "application/json", b"{}").await;
    let db = app.db_path.clone();
    let row = eventually("the first attempt's failure", || {
        let row = event_row(&db, id);
        (row.attempts == 1 && row.lease_until.is_none()).then_some(row)
    })
    .await;
    (app, sources, id, row)
}

/// Refuses the first attempt of the event `waiting`, takes everything else.
fn refuse_first(delivery: &str, nth: usize) -> Reply {
    if delivery == "waiting" && nth == 1 {
        Reply::status(503).retry_after("600")
    } else {
        Reply::status(204)
    }
}

/// A jump forward makes every waiting retry due at once: the running
/// server delivers it at its next look (the dispatcher looks at least
/// every 5 s), early but never lost; nothing else changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_clock_jump_makes_a_waiting_retry_due_and_the_running_server_delivers_it() {
    let down = Downstream::start(refuse_first).await;
    let (app, _, id, row) = event_waiting_for_its_retry(&down, "10m").await;
    let due_in = row.next_attempt_at.unwrap() - hookbox::clock::now_ms();
    assert!(
        (590_000..=600_000).contains(&due_in),
        "Retry-After 600 within a 10 min cap: due in {due_in} ms"
    );

    shift_stored_times(&app.db_path, -JUMP_MS);
    let row = wait_for_state(&app.db_path, id, "delivered").await;
    assert_eq!(row.attempts, 2, "{row:?}");
    assert_eq!(down.hits().len(), 2);
    assert_eq!(
        outcomes(&app.db_path, id),
        [
            (1, "retry".into(), Some(503)),
            (2, "delivered".into(), Some(204))
        ]
    );
    app.shutdown().await;
}

/// A jump back by `J` holds a waiting retry for `J` plus its backoff: the
/// due time was stored as wall-clock ms, and the claim compares it with
/// the (now earlier) wall clock. With `J` = 3 h and `backoff_cap` = 10 min,
/// the event is not claimable 10 minutes, nor 2 hours, after the jump; it
/// is exactly when the clock reaches the stored time again. `backoff_cap`
/// does not bound the wait, and a new event of the same source meanwhile
/// goes out at once (it is stored with the jumped clock).
///
/// This documents the present behaviour. A cap on the due time when it is
/// read (`min(next_attempt_at, now + backoff_cap)` in the claim) would make
/// the first two probes below claim the event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backward_clock_jump_parks_a_waiting_retry_for_the_whole_jump_not_backoff_cap() {
    let down = Downstream::start(refuse_first).await;
    let (app, _sources, id, row) = event_waiting_for_its_retry(&down, "10m").await;
    let due = row.next_attempt_at.unwrap();
    let db = app.db_path.clone();

    // The running server, its clock 3 h back: the retry stays parked while
    // a new event flows past it.
    shift_stored_times(&db, JUMP_MS);
    let fresh = post_event(app.addr, "github", "fresh", "application/json", b"{}").await;
    wait_for_state(&db, fresh, "delivered").await;
    let row = event_row(&db, id);
    assert_eq!(
        (row.state.as_str(), row.attempts),
        ("pending", 1),
        "{row:?}"
    );
    let parked_for = row.next_attempt_at.unwrap() - hookbox::clock::now_ms();
    assert!(
        parked_for > JUMP_MS,
        "due {parked_for} ms from the jumped clock: the jump plus the backoff"
    );
    let dir = app.shutdown().await;
    let db = dir.path().join("hookbox.db");

    // The claim at chosen instants of the jumped clock (each probe in a
    // transaction that is rolled back). `jumped` is when the clock read
    // after the jump, at the moment the retry was scheduled.
    let jumped = due - 600_000 - JUMP_MS;
    let conn = Connection::open(&db).unwrap();
    shift_stored_times(&db, -JUMP_MS); // back to the times the server wrote
    let claimable_at = |now: i64| -> bool {
        let tx = conn.unchecked_transaction().unwrap();
        let claimed = claim(&tx, "github", 10, now, now + 60_000).unwrap();
        tx.rollback().unwrap();
        claimed.iter().any(|c| c.id == id)
    };
    let cap_ms = 600_000;
    assert!(
        !claimable_at(jumped + cap_ms + 1),
        "10 min (the cap) after the jump"
    );
    assert!(!claimable_at(jumped + 2 * HOUR_MS), "2 h after the jump");
    assert!(!claimable_at(due - 1), "1 ms before the stored due time");
    assert!(
        claimable_at(due),
        "once the clock is back at the stored due time"
    );
    // The dispatcher's own view: the next due event is the jump away.
    assert_eq!(next_due(&conn, "github", jumped).unwrap(), Some(due));
}

/// A jump forward past a lease makes a claimed event claimable again while
/// its attempt may still be running: at-least-once, the destination may
/// see it twice (under one `webhook-id`). The first attempt's outcome is
/// then ignored (the row's attempt count moved on), so the event settles
/// once, on the second attempt. A jump back only lengthens a lease, which
/// matters only if an outcome is lost, and the next start clears leases.
#[test]
fn a_forward_clock_jump_past_a_lease_lets_the_event_be_claimed_again_and_settles_it_once() {
    use hookbox::store::dispatch::{AttemptRecord, Settled, record};
    let dir = tempfile::tempdir().unwrap();
    let mut conn = Connection::open(dir.path().join("hookbox.db")).unwrap();
    hookbox::store::schema::apply(&mut conn).unwrap();
    let t = hookbox::clock::now_ms();
    conn.execute(
        "INSERT INTO events (source, delivery_id, received_at, body, state, next_attempt_at)
         VALUES ('github', 'leased', ?1, x'7b7d', 'pending', ?1)",
        [t],
    )
    .unwrap();
    let lease = 2 * 60_000;
    let first = claim(&conn, "github", 10, t, t + lease).unwrap();
    assert_eq!(first.len(), 1);
    assert!(
        claim(&conn, "github", 10, t + lease - 1, t + 2 * lease)
            .unwrap()
            .is_empty(),
        "held while the lease runs"
    );
    // The clock jumps 3 h forward while attempt 1 runs.
    let later = t + JUMP_MS;
    let second = claim(&conn, "github", 10, later, later + lease).unwrap();
    assert_eq!((second.len(), second[0].attempt), (1, 2), "claimed again");
    let outcome = |attempt: u32, settled: Settled| AttemptRecord {
        event_id: first[0].id,
        attempt,
        started_at: t,
        duration_ms: 1,
        settled,
        status: Some(204),
        error: None,
    };
    // Attempt 1 reports a retry, attempt 2 delivery: only the second moves
    // the row.
    record(&conn, &outcome(1, Settled::Retry(later + 1000)), later).unwrap();
    let state: String = conn
        .query_row("SELECT state FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(state, "pending");
    record(&conn, &outcome(2, Settled::Delivered), later).unwrap();
    let (state, attempts): (String, i64) = conn
        .query_row("SELECT state, attempts FROM events", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!((state.as_str(), attempts), ("delivered", 2));
}
