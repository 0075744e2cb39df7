//! Wall-clock jumps, the retry schedule and leases. hookbox stores when a
//! retry is due (`next_attempt_at`) and until when a claim holds
//! (`lease_until`) as wall-clock unix ms, and compares them with the wall
//! clock when it claims. A test cannot move the system clock, but moving
//! every stored time by `-J` is, to what the server reads from the
//! database, the same as its clock jumping forward by `J` (and `+J` the
//! same as a jump back). The signature tolerance under clock skew is in
//! `faults.rs`; a late result of an old claim is `store::deliveries`'s
//! unit tests.

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

use crate::helpers::*;

const HOUR_MS: i64 = 3_600_000;
/// How far the clock jumps in these tests.
const JUMP_MS: i64 = 3 * HOUR_MS;

/// Shifts every stored time of the events, their deliveries and leases by `delta_ms`
/// (so `-J` reads, to the server, as its clock jumping forward by `J`).
fn shift_stored_times(db: &Path, delta_ms: i64) {
    let mut conn = Connection::open(db).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    let tx = conn.transaction().unwrap();
    tx.execute(
        "UPDATE events SET received_at = received_at + ?1",
        [delta_ms],
    )
    .unwrap();
    tx.execute(
        "UPDATE deliveries SET next_attempt_at = next_attempt_at + ?1",
        [delta_ms],
    )
    .unwrap();
    tx.execute(
        "UPDATE leases SET lease_until = lease_until + ?1",
        [delta_ms],
    )
    .unwrap();
    tx.commit().unwrap();
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
        &url_destination_unguarded(&down.url()),
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
    let due_in = row.next_attempt_at.unwrap() - hookbox::support::clock::now_ms();
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

/// A jump back by `J` used to hold a waiting retry for `J` plus its
/// backoff: the due time is stored as wall-clock ms and the claim compares
/// it with the (now earlier) wall clock. No retry is ever scheduled more
/// than `backoff_cap` ahead (Retry-After is capped by it too), so each
/// claim brings a due time beyond `now + backoff_cap` back to that: the
/// retry waits at most `backoff_cap` after the jump, not 3 hours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backward_clock_jump_delays_a_waiting_retry_by_at_most_backoff_cap() {
    let down = Downstream::start(refuse_first).await;
    // Retry-After 600 capped at backoff_cap: due 3 s after the refusal.
    let (app, _sources, id, row) = event_waiting_for_its_retry(&down, "3s").await;
    let db = app.db_path.clone();
    let due = row.next_attempt_at.unwrap();

    // The running server's clock goes 3 h back while the retry waits.
    shift_stored_times(&db, JUMP_MS);
    let parked = event_row(&db, id);
    assert!(
        parked.next_attempt_at.unwrap() - hookbox::support::clock::now_ms() > JUMP_MS,
        "the stored due time reads as more than 3 h away: {parked:?}"
    );
    // The cap (3 s) twice over, plus the dispatcher's 5 s recheck, with
    // room for a slow machine: still hours short of the jump.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let row = loop {
        let row = event_row(&db, id);
        if row.state == "delivered" {
            break row;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still parked: {row:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(row.attempts, 2, "{row:?}");
    assert!(
        hookbox::support::clock::now_ms() < due + JUMP_MS,
        "delivered long before the clock came back to the stored time"
    );
    app.shutdown().await;
}

/// A jump forward past the lease of a running attempt used to make its
/// event claimable again: the next claim handed it out a second time, the
/// destination got it twice at once, and with an order key the event
/// behind it went while the first attempt still ran. Every claim now
/// renews the leases of what the dispatcher runs first, so the attempt
/// stays the only one, and the key's order holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_clock_jump_past_the_lease_of_a_running_attempt_neither_repeats_nor_reorders_it()
{
    let gate = Gate::new();
    let held = gate.clone();
    let down = Downstream::start(move |delivery, nth| {
        if delivery == "k1" && nth == 1 {
            Reply::status(204).until(held.clone())
        } else {
            Reply::status(204)
        }
    })
    .await;
    // The attempt's timeout outlives the test: only the gate ends it.
    let sources = deliver_source("github", &url_destination(&down.url()), "60s", 5);
    let app = TestApp::spawn(&sources).await;
    let db = app.db_path.clone();
    let post = |delivery, repo| {
        let body = repo_body(repo, 1);
        async move { post_event(app.addr, "github", delivery, "application/json", &body).await }
    };
    let k1 = post("k1", "acme/shop").await;
    down.wait_for_hits(1).await;
    let k2 = post("k2", "acme/shop").await;

    // The wall clock steps 3 h forward while k1's attempt runs. k2's
    // arrival made the dispatcher claim, and a claim renews k1's lease:
    // one that lands after the step undoes it, so the step is made again.
    let mut steps = 0;
    loop {
        shift_stored_times(&db, -JUMP_MS);
        steps += 1;
        let lease = event_row(&db, k1).lease_until.unwrap();
        if lease < hookbox::support::clock::now_ms() {
            break;
        }
        assert!(steps < 5, "k1's lease reads as run out");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // An event of another key: the dispatcher claims at once.
    let other = post("other", "acme/web").await;
    wait_for_state(&db, other, "delivered").await;
    let row = event_row(&db, k1);
    assert_eq!(
        row.leased_attempt,
        Some(1),
        "k1 was not claimed again: {row:?}"
    );
    assert!(
        row.lease_until.unwrap() > hookbox::support::clock::now_ms(),
        "k1's lease was renewed: {row:?}"
    );
    assert_eq!(down.hits_for("k1").len(), 1);
    assert!(down.hits_for("k2").is_empty(), "k2 waits for k1");

    gate.open();
    wait_for_state(&db, k1, "delivered").await;
    wait_for_state(&db, k2, "delivered").await;
    let shop: Vec<String> = down
        .hits()
        .iter()
        .filter(|h| h.delivery() != "other")
        .map(|h| h.delivery().to_owned())
        .collect();
    assert_eq!(shop, ["k1", "k2"], "each once, in order");
    assert_eq!(outcomes(&db, k1), [(1, "delivered".into(), Some(204))]);
    app.shutdown().await;
}
