//! Dispatch against a real downstream: `helpers::Downstream` records
//! every request (headers, body, arrival) and answers per a script; command
//! destinations run real shell scripts. Small backoff values keep retries
//! quick. `deliver_crash.rs` covers kill -9 and graceful shutdown.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::helpers::*;

/// Verifies a forwarded request the way the user's app would, with
/// hookbox's own Standard Webhooks verifier.
fn verify_signature(hit: &Hit) -> Result<(), String> {
    verify_signature_with(SIGNING_SECRET, hit)
}

// ---------------------------------------------------------------- url -----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_that_fails_twice_is_delivered_once_signed_and_byte_identical() {
    let down = Downstream::start(|_, nth| match nth {
        // Retry-After is honoured up to backoff_cap (400 ms): a lower
        // bound on the first wait that full jitter cannot take away.
        1 => Reply::status(503).retry_after("1"),
        2 => Reply::status(500),
        _ => Reply::status(204),
    })
    .await;
    let app = TestApp::spawn(&deliver_source(
        "github",
        &url_destination(&down.url()),
        "2s",
        5,
    ))
    .await;
    // Odd spacing, escapes and raw UTF-8: any re-serialisation shows.
    let body = "{ \"repository\" : {\"full_name\":\"acme/widgets\"},\n  \"zen\":\"caf\u{e9} \\u00e9\" }\r\n"
        .as_bytes();
    let content_type = "application/json; charset=utf-8";
    let id = post_event(app.addr, "github", "guid-1", content_type, body).await;

    wait_for_state(&app.db_path, id, "delivered").await;
    let row = event_row(&app.db_path, id);
    assert_eq!(row.attempts, 3);
    assert_eq!(row.lease_until, None);
    assert_eq!(
        outcomes(&app.db_path, id),
        [
            (1, "retry".into(), Some(503)),
            (2, "retry".into(), Some(500)),
            (3, "delivered".into(), Some(204)),
        ]
    );
    let attempts = attempt_rows(&app.db_path, id);
    assert!(attempts[0].error.as_deref().unwrap().contains("HTTP 503"));
    assert_eq!(attempts[2].error, None);
    for pair in attempts.windows(2) {
        assert!(
            pair[1].started_at >= pair[0].started_at + pair[0].duration_ms,
            "attempts overlap: {attempts:?}"
        );
    }

    let hits = down.hits();
    assert_eq!(hits.len(), 3, "delivered once, after two failures");
    let gap = hits[1].at - hits[0].at;
    assert!(
        gap >= Duration::from_millis(390),
        "Retry-After: 1 (capped at 400 ms) was not honoured: second attempt after {gap:?}"
    );
    assert!(hits[2].at >= hits[1].at);
    let webhook_id = hits[0].header("webhook-id").to_owned();
    assert!(webhook_id.starts_with("msg_"), "{webhook_id}");
    for (n, hit) in hits.iter().enumerate() {
        assert_eq!(&hit.body[..], body, "attempt {} body", n + 1);
        assert_eq!(hit.header("webhook-id"), webhook_id, "stable webhook-id");
        assert_eq!(hit.header("content-type"), content_type);
        assert_eq!(hit.header("x-github-event"), "push");
        assert_eq!(hit.header("x-github-delivery"), "guid-1");
        assert_eq!(hit.header("x-hookbox-attempt"), (n + 1).to_string());
        assert_eq!(hit.header("x-hookbox-event-id"), id.to_string());
        assert!(hit.headers.get("x-hub-signature-256").is_none());
        assert_eq!(verify_signature(hit), Ok(()), "attempt {}", n + 1);
        let ts: i64 = hit.header("webhook-timestamp").parse().unwrap();
        assert!((ts - now_secs()).abs() < 60, "webhook-timestamp {ts}");
    }
    // The verifier is not a rubber stamp: a changed body fails it.
    let mut tampered = hits[2].clone();
    tampered.body = Bytes::from_static(b"{}");
    assert!(verify_signature(&tampered).is_err());
    app.shutdown().await;
}

/// A claim carries small bodies (up to 64 KiB each) to their attempts; a
/// larger one is read when its attempt starts. Either way the destination
/// gets the stored bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_carried_by_the_claim_and_bodies_read_at_the_attempt_arrive_identical() {
    let down = Downstream::start(|_, _| Reply::status(204)).await;
    let app = TestApp::spawn(&deliver_source(
        "github",
        &url_destination(&down.url()),
        "2s",
        5,
    ))
    .await;
    let mut sent = Vec::new();
    for (n, size) in [10usize, 64 * 1024, 64 * 1024 + 1, 300 * 1024, 2_000]
        .into_iter()
        .enumerate()
    {
        let mut body = format!("{{\"n\":{n},\"pad\":\"").into_bytes();
        body.resize(size - 2, b'a' + n as u8);
        body.extend_from_slice(b"\"}");
        let id = post_event(
            app.addr,
            "github",
            &format!("guid-{n}"),
            "application/json",
            &body,
        )
        .await;
        sent.push((id, body));
    }
    for (id, _) in &sent {
        wait_for_state(&app.db_path, *id, "delivered").await;
    }
    let hits = down.hits();
    assert_eq!(hits.len(), sent.len());
    for (id, body) in &sent {
        let hit = hits
            .iter()
            .find(|h| h.header("x-hookbox-event-id") == id.to_string())
            .unwrap_or_else(|| panic!("event {id} never arrived"));
        assert_eq!(hit.body.len(), body.len(), "event {id}");
        assert!(hit.body[..] == body[..], "event {id}: the body differs");
        assert_eq!(verify_signature(hit), Ok(()), "event {id}");
    }
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_410_is_dead_at_once_exhausted_retries_are_dead_and_replay_delivers_the_same_row() {
    let down = Downstream::start(|delivery, _| match delivery {
        "gone" => Reply::status(410),
        _ => Reply::status(500),
    })
    .await;
    let sources = deliver_source("github", &url_destination(&down.url()), "2s", 3);
    let app = TestApp::spawn(&sources).await;
    let gone = post_event(app.addr, "github", "gone", "application/json", b"{}").await;
    let flaky = post_event(app.addr, "github", "flaky", "application/json", b"{}").await;

    let row = wait_for_state(&app.db_path, gone, "dead").await;
    assert_eq!(row.attempts, 1);
    assert_eq!(
        outcomes(&app.db_path, gone),
        [(1, "dead".into(), Some(410))]
    );
    let row = wait_for_state(&app.db_path, flaky, "dead").await;
    assert_eq!(row.attempts, 3);
    assert!(
        row.last_error.as_deref().unwrap().contains("HTTP 500"),
        "{row:?}"
    );
    assert_eq!(
        outcomes(&app.db_path, flaky),
        [
            (1, "retry".into(), Some(500)),
            (2, "retry".into(), Some(500)),
            (3, "dead".into(), Some(500)),
        ]
    );
    assert_eq!(down.hits_for("gone").len(), 1);
    assert_eq!(down.hits_for("flaky").len(), 3);

    // The operator fixes the downstream and replays with the CLI while the
    // server runs: one event by id, then every dead one of the source.
    down.set_script(|_, _| Reply::status(204));
    let config = write_cli_config(&app, &sources);
    let out = hookbox_cli(&config, &["replay", &flaky.to_string()]).await;
    assert!(out.contains("1 delivery put back to pending"), "{out}");
    let out = hookbox_cli(&config, &["replay", "--dead", "--source", "github"]).await;
    assert!(out.contains("1 delivery put back to pending"), "{out}");

    // The running server notices within its idle recheck (5 s).
    for (id, delivery) in [(flaky, "flaky"), (gone, "gone")] {
        let row = wait_for_state(&app.db_path, id, "delivered").await;
        assert_eq!(row.attempts, 1, "{delivery}: attempts start again at 1");
        let hits = down.hits_for(delivery);
        let last = hits.last().unwrap();
        assert!(last.ok());
        assert_eq!(last.header("x-hookbox-attempt"), "1");
        assert_eq!(last.header("webhook-id"), hits[0].header("webhook-id"));
        let rows = outcomes(&app.db_path, id);
        assert_eq!(rows.last().unwrap(), &(1, "delivered".into(), Some(204)));
    }
    assert_eq!(down.hits_for("flaky").len(), 4);
    assert_eq!(down.hits_for("gone").len(), 2);
    assert_eq!(
        app.count("SELECT count(*) FROM events"),
        2,
        "replay adds no row"
    );
    assert_eq!(
        app.count("SELECT count(*) FROM events WHERE delivery_id = 'flaky'"),
        1
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_replay_is_picked_up_within_seconds_while_another_event_waits_for_a_distant_retry() {
    let down = Downstream::start(|delivery, _| match delivery {
        "gone" => Reply::status(410),
        _ => Reply::status(503).retry_after("600"),
    })
    .await;
    // Retry-After: 600 within a 10 min cap: the blocker is due in exactly
    // 10 minutes, whatever the jitter draws.
    let sources = deliver_source_backoff(
        "github",
        &url_destination_unguarded(&down.url()),
        "2s",
        5,
        "10m",
        "10m",
    );
    let app = TestApp::spawn(&sources).await;
    let gone = post_event(app.addr, "github", "gone", "application/json", b"{}").await;
    wait_for_state(&app.db_path, gone, "dead").await;
    let blocker = post_event(app.addr, "github", "blocker", "application/json", b"{}").await;
    let db = app.db_path.clone();
    let row = eventually("the blocker's first failure", || {
        let row = event_row(&db, blocker);
        (row.attempts == 1 && row.lease_until.is_none()).then_some(row)
    })
    .await;
    assert!(
        row.next_attempt_at.unwrap() > now_secs() * 1000 + 500_000,
        "{row:?}"
    );

    down.set_script(|_, _| Reply::status(204));
    let config = write_cli_config(&app, &sources);
    let out = hookbox_cli(&config, &["replay", "--dead"]).await;
    assert!(out.contains("1 delivery put back to pending"), "{out}");
    // "A running server picks them up within seconds" (hookbox replay
    // --help); the idle recheck is 5 s.
    wait_for_state(&app.db_path, gone, "delivered").await;
    assert_eq!(event_row(&app.db_path, blocker).state, "pending");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delivery_outcomes_are_recorded_even_when_ingest_fills_the_writer_queue() {
    let down = Downstream::start(|_, _| Reply::status(204)).await;
    let sources = deliver_source("github", &url_destination(&down.url()), "2s", 5);
    // A tiny queue, so ingest fills it as a heavy load fills the default.
    let app = TestApp::spawn_with(&sources, "writer_queue = 4").await;
    let addr = app.addr;
    let clients: Vec<_> = (0..32)
        .map(|c| {
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                let mut accepted = 0;
                for n in 0..40 {
                    let body = b"{}";
                    let r = client
                        .post(format!("http://{addr}/hooks/github"))
                        .header("x-github-delivery", format!("load-{c}-{n}"))
                        .header("x-hub-signature-256", github_signature(GITHUB_SECRET, body))
                        .body(body.to_vec())
                        .send()
                        .await
                        .unwrap();
                    // 503 is the receiver's fair answer to a full queue.
                    accepted += usize::from(r.status() == 202);
                }
                accepted
            })
        })
        .collect();
    let mut accepted = 0;
    for c in clients {
        accepted += c.await.unwrap();
    }
    assert!(accepted > 0);
    // Every accepted event reaches the downstream once and is recorded
    // as delivered; a lost outcome leaves it leased, to be sent again.
    let db = app.db_path.clone();
    eventually("every accepted event to be delivered", || {
        let conn = rusqlite::Connection::open(&db).unwrap();
        let delivered: i64 = conn
            .query_row(
                &format!("SELECT count(*) FROM events WHERE {STATE} = 'delivered'"),
                [],
                |r| r.get(0),
            )
            .unwrap();
        (delivered as usize == accepted).then_some(())
    })
    .await;
    assert_eq!(down.hits().len(), accepted, "each delivered once");
    app.shutdown().await;
}

/// The CLI's config: the test app's database and sources.
fn write_cli_config(app: &TestApp, sources: &str) -> PathBuf {
    let path = app.dir.path().join("cli.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\ndatabase = {:?}\n{sources}",
            app.db_path.display().to_string()
        ),
    )
    .unwrap();
    path
}

/// Runs the real binary with `--config` and returns its stdout; it must
/// succeed.
async fn hookbox_cli(config: &Path, args: &[&str]) -> String {
    let out = tokio::process::Command::from(hookbox())
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "hookbox {args:?}: {:?}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_sharing_a_key_are_delivered_in_order_while_another_key_flows() {
    let down = Downstream::start(|delivery, nth| match (delivery, nth) {
        // e1 fails twice; each failure parks it for at least 400 ms
        // (Retry-After up to the cap), the first while also held 150 ms.
        ("e1", 1) => Reply::status(503)
            .retry_after("1")
            .after(Duration::from_millis(150)),
        ("e1", 2) => Reply::status(503).retry_after("1"),
        _ => Reply::status(204),
    })
    .await;
    let app = TestApp::spawn(&deliver_source(
        "github",
        &url_destination(&down.url()),
        "2s",
        5,
    ))
    .await;
    let mut ids = HashMap::new();
    for (n, (delivery, repo)) in [
        ("e1", "acme/a"),
        ("e2", "acme/a"),
        ("e3", "acme/a"),
        ("other", "acme/b"),
    ]
    .into_iter()
    .enumerate()
    {
        let id = post_event(
            app.addr,
            "github",
            delivery,
            "application/json",
            &repo_body(repo, n),
        )
        .await;
        ids.insert(delivery, id);
    }
    for id in ids.values() {
        wait_for_state(&app.db_path, *id, "delivered").await;
    }

    let hits = down.hits();
    let order: Vec<(&str, u16)> = hits
        .iter()
        .map(|h| (h.delivery(), h.status.as_u16()))
        .collect();
    let successes: Vec<&str> = hits.iter().filter(|h| h.ok()).map(Hit::delivery).collect();
    let keyed: Vec<&str> = successes
        .iter()
        .copied()
        .filter(|d| *d != "other")
        .collect();
    assert_eq!(keyed, ["e1", "e2", "e3"], "arrivals: {order:?}");
    let position = |d: &str| successes.iter().position(|s| *s == d).unwrap();
    assert!(
        position("other") < position("e1"),
        "the other key waited for e1: {order:?}"
    );
    // Nothing of key acme/a arrives before the event ahead of it succeeded.
    let first = |d: &str| hits.iter().position(|h| h.delivery() == d).unwrap();
    let success = |d: &str| {
        hits.iter()
            .position(|h| h.delivery() == d && h.ok())
            .unwrap()
    };
    assert!(first("e2") > success("e1"), "{order:?}");
    assert!(first("e3") > success("e2"), "{order:?}");
    assert_eq!(hits.len(), 6, "{order:?}");
    assert_eq!(event_row(&app.db_path, ids["e1"]).attempts, 3);
    for d in ["e2", "e3", "other"] {
        assert_eq!(event_row(&app.db_path, ids[d]).attempts, 1, "{d}");
    }
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_more_attempts_run_at_once_than_the_source_s_concurrency() {
    let down = Downstream::start(|_, _| Reply::status(204).after(Duration::from_millis(500))).await;
    let destination = format!("{}\nconcurrency = 2", url_destination(&down.url()));
    let app = TestApp::spawn(&deliver_source("github", &destination, "5s", 3)).await;
    let mut ids = Vec::new();
    for n in 0..8 {
        let body = repo_body(&format!("acme/{n}"), n);
        ids.push(
            post_event(
                app.addr,
                "github",
                &format!("c{n}"),
                "application/json",
                &body,
            )
            .await,
        );
    }
    for id in ids {
        wait_for_state(&app.db_path, id, "delivered").await;
    }
    // Eight keys could all go at once; two at a time is the limit, and
    // two is what it uses.
    assert_eq!(down.max_in_flight(), 2);
    assert_eq!(down.hits().len(), 8);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_destination_runs_sixteen_attempts_at_once_by_default() {
    // Slow answers: every attempt of the burst is in flight together, up
    // to the default limit, which a backlog at a nearby endpoint needs to
    // keep pace with ingest (the benchmark page).
    let down = Downstream::start(|_, _| Reply::status(204).after(Duration::from_secs(2))).await;
    let app = TestApp::spawn(&deliver_source(
        "github",
        &url_destination(&down.url()),
        "5s",
        3,
    ))
    .await;
    let mut ids = Vec::new();
    for n in 0..24 {
        let body = repo_body(&format!("acme/{n}"), n);
        let delivery = format!("s{n}");
        ids.push(post_event(app.addr, "github", &delivery, "application/json", &body).await);
    }
    for id in ids {
        wait_for_state(&app.db_path, id, "delivered").await;
    }
    assert_eq!(down.max_in_flight(), 16);
    assert_eq!(down.hits().len(), 24);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_event_waits_for_the_event_of_its_key_in_flight() {
    const SLOW: Duration = Duration::from_millis(1500);
    let down = Downstream::start(|delivery, _| match delivery {
        "a1" => Reply::status(410),
        _ => Reply::status(204),
    })
    .await;
    let app = TestApp::spawn(&deliver_source(
        "github",
        &url_destination(&down.url()),
        "5s",
        3,
    ))
    .await;
    let post = |delivery: &'static str, n| async move {
        let body = repo_body("acme/a", n);
        post_event(app.addr, "github", delivery, "application/json", &body).await
    };
    let a1 = post("a1", 1).await;
    wait_for_state(&app.db_path, a1, "dead").await;
    // a2, of the same key, went on without a1 and is slow to answer.
    down.set_script(|delivery, _| match delivery {
        "a2" => Reply::status(204).after(SLOW),
        _ => Reply::status(204),
    });
    let a2 = post("a2", 2).await;
    eventually("a2 in flight", || {
        (!down.hits_for("a2").is_empty()).then_some(())
    })
    .await;
    let r = app
        .admin_post(&format!("/api/events/{a1}/replay"), serde_json::json!({}))
        .await;
    assert_eq!(r.status(), 200);
    wait_for_state(&app.db_path, a1, "delivered").await;
    wait_for_state(&app.db_path, a2, "delivered").await;
    let a2_sent = down.hits_for("a2")[0].at;
    let a1_again = down.hits_for("a1")[1].at;
    assert!(
        a1_again >= a2_sent + SLOW,
        "a1 went {:?} after a2, while a2 was still in flight",
        a1_again - a2_sent
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downstream_that_is_down_for_a_while_loses_nothing() {
    // A port nobody listens on: connections are refused until the
    // downstream starts there.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let sources = deliver_source(
        "github",
        &url_destination_unguarded(&format!("http://{addr}/hook")),
        "2s",
        50,
    );
    let app = TestApp::spawn(&sources).await;
    let started = Instant::now();
    let mut events = Vec::new();
    for n in 0..20 {
        let delivery = format!("ev-{n:02}");
        // Half without a key, half on three keys.
        let body = if n % 2 == 0 {
            format!(r#"{{"n":{n}}}"#).into_bytes()
        } else {
            repo_body(&format!("acme/{}", n % 3), n)
        };
        let id = post_event(app.addr, "github", &delivery, "application/json", &body).await;
        events.push((delivery, id, n % 2 == 1));
    }
    // Down long enough that every key-less event failed at least once.
    let db = app.db_path.clone();
    eventually("every key-less event to fail while down", || {
        events
            .iter()
            .filter(|(_, _, keyed)| !keyed)
            .all(|(_, id, _)| !attempt_rows(&db, *id).is_empty())
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1).saturating_sub(started.elapsed())).await;
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) FROM events WHERE {STATE} = 'delivered'"
        )),
        0
    );
    let down = Downstream::start_on(addr, |_, _| Reply::status(204)).await;

    for (delivery, id, keyed) in &events {
        wait_for_state(&app.db_path, *id, "delivered").await;
        let hits = down.hits_for(delivery);
        assert!(hits.iter().any(Hit::ok), "{delivery} never arrived");
        let rows = attempt_rows(&app.db_path, *id);
        assert_eq!(rows.last().unwrap().outcome, "delivered", "{delivery}");
        if !keyed {
            let first = &rows[0];
            assert_eq!(first.outcome, "retry", "{delivery}: {rows:?}");
            let error = first.error.as_deref().unwrap_or("");
            assert!(error.contains("connection"), "{delivery}: {error}");
        }
    }
    assert_eq!(app.count("SELECT count(*) FROM events"), 20);
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) FROM events WHERE {STATE} <> 'delivered'"
        )),
        0
    );
    // Each key's events still arrived in order.
    let successes: Vec<String> = down
        .hits()
        .iter()
        .filter(|h| h.ok())
        .map(|h| h.delivery().to_owned())
        .collect();
    for key in 0..3 {
        let expected: Vec<String> = events
            .iter()
            .enumerate()
            .filter(|(n, (_, _, keyed))| *keyed && n % 3 == key)
            .map(|(_, (d, _, _))| d.clone())
            .collect();
        let got: Vec<String> = successes
            .iter()
            .filter(|d| expected.contains(d))
            .cloned()
            .collect();
        assert_eq!(got, expected, "key acme/{key}");
    }
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_without_a_destination_stores_events_and_never_dispatches_them() {
    let down = Downstream::start(|_, _| Reply::status(204)).await;
    let sources = format!(
        "{}\n[[sources]]\nname = \"archive\"\nkind = \"github\"\nsecrets = [\"{GITHUB_SECRET}\"]\n",
        deliver_source("github", &url_destination(&down.url()), "2s", 5)
    );
    let app = TestApp::spawn(&sources).await;
    let kept = post_event(app.addr, "archive", "kept", "application/json", b"{}").await;
    let sent = post_event(app.addr, "github", "sent", "application/json", b"{}").await;
    // The dispatcher is running: the other source's event goes out.
    wait_for_state(&app.db_path, sent, "delivered").await;

    let row = event_row(&app.db_path, kept);
    assert_eq!(row.state, "stored");
    assert_eq!(row.attempts, 0);
    assert_eq!(row.next_attempt_at, None);
    assert_eq!(row.lease_until, None);
    assert!(attempt_rows(&app.db_path, kept).is_empty());
    assert!(down.hits_for("kept").is_empty());
    assert_eq!(down.hits().len(), 1);
    app.shutdown().await;
}

// ------------------------------------------------------------ command -----

/// Records stdin and the `HOOKBOX_*` variables per attempt in `$1`, fails
/// the first attempt with exit 3 and a line on stderr, then succeeds.
const RECORDING_HANDLER: &str = r#"
out="$1"
n=$(cat "$out/count" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" > "$out/count"
cat > "$out/stdin-$n"
printf 'SOURCE=%s\nEVENT_TYPE=%s\nDELIVERY_ID=%s\nEVENT_ID=%s\nATTEMPT=%s\n' \
  "${HOOKBOX_SOURCE-unset}" "${HOOKBOX_EVENT_TYPE-unset}" "${HOOKBOX_DELIVERY_ID-unset}" \
  "${HOOKBOX_EVENT_ID-unset}" "${HOOKBOX_ATTEMPT-unset}" > "$out/env-$n"
if [ "$n" -eq 1 ]; then
  echo "handler: database not ready" >&2
  exit 3
fi
exit 0
"#;

/// Starts two sleeps in the background, notes their pids, and waits.
const HANGING_HANDLER: &str = r#"
out="$1"
sleep 60 &
echo $! > "$out/background.pid"
sleep 61 &
echo $! > "$out/foreground.pid"
echo $$ > "$out/shell.pid"
wait
"#;

/// Writes `script` to `dir` and returns the `command` line running it
/// with `dir` as its argument.
fn command_destination(dir: &Path, script: &str) -> String {
    let path = dir.join("handler.sh");
    std::fs::write(&path, script).unwrap();
    format!(
        "command = [\"/bin/sh\", {:?}, {:?}]",
        path.display().to_string(),
        dir.display().to_string()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_gets_the_body_on_stdin_and_the_event_in_its_environment_and_is_retried() {
    let out = tempfile::tempdir().unwrap();
    let destination = command_destination(out.path(), RECORDING_HANDLER);
    let app = TestApp::spawn(&deliver_source("github", &destination, "10s", 5)).await;
    let body = b"{\"zen\":\"caf\xc3\xa9\"}\r\n\x00\xff binary tail\n";
    let id = post_event(
        app.addr,
        "github",
        "cmd-1",
        "application/octet-stream",
        body,
    )
    .await;

    let row = wait_for_state(&app.db_path, id, "delivered").await;
    assert_eq!(row.attempts, 2);
    let rows = attempt_rows(&app.db_path, id);
    assert_eq!(
        rows.iter()
            .map(|a| (a.attempt, a.outcome.as_str(), a.status))
            .collect::<Vec<_>>(),
        [(1, "retry", None), (2, "delivered", None)]
    );
    let error = rows[0].error.as_deref().unwrap();
    assert!(error.contains("exit status 3"), "{error}");
    assert!(error.contains("handler: database not ready"), "{error}");
    assert_eq!(rows[1].error, None);

    let read = |name: &str| std::fs::read(out.path().join(name)).unwrap();
    for n in 1..=2 {
        assert_eq!(read(&format!("stdin-{n}")), body, "stdin of attempt {n}");
        let env = String::from_utf8(read(&format!("env-{n}"))).unwrap();
        assert_eq!(
            env,
            format!(
                "SOURCE=github\nEVENT_TYPE=push\nDELIVERY_ID=cmd-1\nEVENT_ID={id}\nATTEMPT={n}\n"
            )
        );
    }
    assert_eq!(read("count"), b"2\n", "run exactly twice");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_times_out_is_killed_with_its_whole_process_group() {
    let out = tempfile::tempdir().unwrap();
    let destination = command_destination(out.path(), HANGING_HANDLER);
    let app = TestApp::spawn(&deliver_source("github", &destination, "500ms", 1)).await;
    let id = post_event(app.addr, "github", "hang", "application/json", b"{}").await;
    // Known (and killed on drop) before anything can fail.
    let pids: Vec<(&str, i32)> = eventually("the handler to note its pids", || {
        ["shell", "foreground", "background"]
            .into_iter()
            .map(|name| {
                let text = std::fs::read_to_string(out.path().join(format!("{name}.pid"))).ok()?;
                Some((name, text.trim().parse().ok()?))
            })
            .collect()
    })
    .await;
    let _cleanup = KillOnDrop(pids.iter().map(|(_, pid)| *pid).collect());

    let row = wait_for_state(&app.db_path, id, "dead").await;
    assert_eq!(row.attempts, 1);
    let rows = attempt_rows(&app.db_path, id);
    assert_eq!(rows.len(), 1);
    let error = rows[0].error.as_deref().unwrap();
    assert!(error.contains("timed out after 500ms"), "{error}");
    assert!(rows[0].duration_ms >= 490, "{rows:?}");

    let alive = || -> Vec<String> {
        pids.iter()
            .filter(|(_, pid)| running(*pid))
            .map(|(name, pid)| format!("{name} ({pid})"))
            .collect()
    };
    // SIGKILL went out before the attempt was recorded; allow the kernel a
    // moment to finish the processes off.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !alive().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(alive().is_empty(), "still running: {:?}", alive());
    app.shutdown().await;
}

/// Whether `pid` is a live process running `sleep` or `sh` (a zombie
/// waiting for init to reap it is not; a reused pid is not ours).
fn running(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) S ...": the state follows the last ')'.
    let Some((comm, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    let state = rest.trim_start().chars().next();
    let ours = comm.ends_with("(sleep") || comm.ends_with("(sh");
    ours && !matches!(state, Some('Z' | 'X'))
}

/// Kills leftover processes when the test fails, so nothing outlives it.
struct KillOnDrop(Vec<i32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for pid in &self.0 {
            if running(*pid) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(*pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}
