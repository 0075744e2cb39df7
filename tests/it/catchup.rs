//! Catch-up against fakes of GitHub's and Stripe's APIs (`fake.rs`): which
//! redeliveries hookbox asks for, what it does on 401 and rate limits, the
//! App JWT, the start-up pass after downtime; Stripe backfill in
//! `stripe.rs`; GitLab resend against its own fake (`gitlab_fake.rs`) in
//! `gitlab.rs`; Paddle replay and Square backfill against theirs
//! (`paddle_fake.rs`, `square_fake.rs`) in `paddle.rs` and `square.rs`;
//! the real binary through a simulated outage in `e2e.rs`.

mod e2e;
pub mod fake;
mod gitlab;
mod gitlab_fake;
mod ledger;
mod paddle;
mod paddle_fake;
mod square;
mod square_fake;
mod stripe;

use std::path::Path;
use std::time::{Duration, Instant};

use hookbox::catchup::{self, RunReport};
use hookbox::config::{self, Config};
use hookbox::ingress::receive::registry::PROVIDERS;
use rusqlite::Connection;

use crate::helpers::*;
use fake::{Attempt, BASE_ID, Fake, HOOK_ID, Mode, TOKEN};

/// The `github` source with a redelivery job against `fake`.
pub fn github_source(api_url: &str) -> String {
    format!(
        "{GITHUB_SOURCE}\n[sources.github_redelivery]\nrepo = \"acme/shop\"\nhook_id = {HOOK_ID}\ntoken = \"{TOKEN}\"\napi_url = \"{api_url}\"\npace = \"10ms\"\n"
    )
}

/// A config on `db` with these sources, for the library's CLI entry point.
pub fn config_at(db: &Path, sources: &str) -> Config {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\ndatabase = {:?}\n{sources}",
        db.display().to_string()
    );
    config::from_toml(&text, "test".into(), &PROVIDERS).unwrap()
}

/// A database at the current schema, as `serve` would leave it.
pub fn new_db(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("hookbox.db");
    let mut conn = Connection::open(&path).unwrap();
    hookbox::store::schema::apply(&mut conn).unwrap();
    path
}

pub async fn pass(config: &Config, source: &str, dry_run: bool) -> RunReport {
    catchup::run_cli(config, source, dry_run, Duration::ZERO)
        .await
        .unwrap()
}

pub fn query_i64(db: &Path, sql: &str) -> i64 {
    Connection::open(db)
        .unwrap()
        .query_row(sql, [], |r| r.get(0))
        .unwrap()
}

/// Waits until `sql` counts at least `n`.
pub async fn wait_for_count(db: &Path, sql: &str, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let got = query_i64(db, sql);
        if got >= n {
            return;
        }
        assert!(Instant::now() < deadline, "{sql}: {got}, wanted {n}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

const FINISHED_RUNS: &str = "SELECT count(*) FROM catchup_runs WHERE finished_at IS NOT NULL";

fn ago(secs: i64) -> i64 {
    now_secs() - secs
}

#[tokio::test]
async fn the_start_up_pass_asks_once_for_each_event_that_never_got_through() {
    let id = |n: i64| BASE_ID + n;
    let fake = Fake::start(vec![
        // Failed, then a redelivery succeeded: leave alone.
        Attempt::new(id(1), "failed-then-ok", ago(7200), false),
        Attempt::new(id(2), "failed-then-ok", ago(3600), true),
        // Failed twice: ask for the newest attempt.
        Attempt::new(id(3), "failed-twice", ago(10_800), false),
        Attempt::new(id(4), "failed-twice", ago(5400), false),
        Attempt::new(id(5), "ok-only", ago(600), true),
        // Older than GitHub redelivers: never asked.
        Attempt::new(id(6), "too-old", ago(4 * 86_400), false),
        // Failed at GitHub, but hookbox stored it (the answer got lost).
        Attempt::new(id(7), "already-held", ago(1800), false),
        Attempt::new(id(8), "failed-issue", ago(1200), false).event("issues"),
        Attempt::new(id(9), "failed-thrice", ago(9000), false),
        Attempt::new(id(10), "failed-thrice", ago(8000), false),
        Attempt::new(id(11), "failed-thrice", ago(300), false),
    ]);
    let fake = fake.await;
    // A first run without the job stores "already-held".
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    assert_eq!(app.post_github("already-held", b"{}").await.status(), 202);
    let dir = app.shutdown().await;

    let app = TestApp::spawn_in(dir, &github_source(&fake.url()), "").await;
    fake.redeliver_to(app.url("/hooks/github"), GITHUB_SECRET);
    wait_for_count(&app.db_path, FINISHED_RUNS, 1).await;

    // Oldest event first, each GUID's newest attempt, 64-bit ids.
    assert_eq!(fake.posts(), vec![id(4), id(8), id(11)]);
    fake.assert_no_problems();
    let requests = fake.inner.lock().unwrap().requests.clone();
    assert_eq!(
        requests[0],
        format!("GET /repos/acme/shop/hooks/{HOOK_ID}/deliveries?per_page=100")
    );
    assert!(
        requests
            .iter()
            .filter(|r| r.starts_with("GET"))
            .skip(1)
            .all(|r| r.starts_with("GET /repositories/424242/") && r.contains("cursor=v1_")),
        "next links are followed as given: {requests:#?}"
    );
    // Every redelivered event is in the inbox once, though the fake sent
    // each twice.
    for guid in [
        "failed-twice",
        "failed-issue",
        "failed-thrice",
        "already-held",
    ] {
        let n = app.count(&format!(
            "SELECT count(*) FROM events WHERE source = 'github' AND delivery_id = '{guid}'"
        ));
        assert_eq!(n, 1, "{guid}");
    }
    assert_eq!(app.count("SELECT count(*) FROM events"), 4);
    let db = app.db_path.clone();
    assert_eq!(
        query_i64(
            &db,
            "SELECT count(*) FROM redelivery_requests WHERE outcome = 'asked' AND attempt_id > 4294967296"
        ),
        3
    );
    assert_eq!(
        query_i64(
            &db,
            "SELECT asked * 100 + seen * 10 + complete FROM catchup_runs"
        ),
        3 * 100 + 6 * 10 + 1,
        "asked 3 of 6 GUIDs in the window, complete"
    );
    assert_eq!(query_i64(&db, "SELECT count(*) FROM catchup_state"), 1);

    // Restarted while the mark is fresh: no start-up pass.
    let dir = app.shutdown().await;
    let app = TestApp::spawn_in(dir, &github_source(&fake.url()), "").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(query_i64(&app.db_path, FINISHED_RUNS), 1);
    let dir = app.shutdown().await;

    // Down for longer than the interval: a pass at start-up, which finds
    // the redeliveries OK now and asks for nothing more.
    Connection::open(dir.path().join("hookbox.db"))
        .unwrap()
        .execute(
            "UPDATE catchup_state SET last_success_at = last_success_at - 7200000",
            [],
        )
        .unwrap();
    let app = TestApp::spawn_in(dir, &github_source(&fake.url()), "").await;
    wait_for_count(&app.db_path, FINISHED_RUNS, 2).await;
    assert_eq!(fake.posts().len(), 3, "nothing asked twice");
    app.shutdown().await;
}

#[tokio::test]
async fn a_401_fails_the_pass_clearly_without_moving_the_mark() {
    let fake = Fake::start(vec![Attempt::new(BASE_ID, "g", ago(60), false)]).await;
    fake.set_mode(Mode::Unauthorized);
    let dir = tempfile::tempdir().unwrap();
    let db = new_db(dir.path());
    let config = config_at(&db, &github_source(&fake.url()));
    let report = pass(&config, "github", false).await;
    let error = report.error.clone().unwrap();
    assert!(error.contains("401"), "{error}");
    assert!(error.contains("token"), "says what to fix: {error}");
    assert!(!error.contains(TOKEN), "the token leaked: {error}");
    assert!(!report.complete);
    assert!(fake.posts().is_empty());
    assert_eq!(query_i64(&db, "SELECT count(*) FROM catchup_state"), 0);
    assert_eq!(
        query_i64(
            &db,
            "SELECT count(*) FROM catchup_runs WHERE complete = 0 AND error LIKE '%401%' AND finished_at IS NOT NULL"
        ),
        1
    );
    assert_eq!(
        query_i64(&db, "SELECT count(*) FROM job_locks"),
        0,
        "the lock is released"
    );
}

#[tokio::test]
async fn a_rate_limit_stops_the_pass_and_the_next_resumes_without_asking_twice() {
    let attempts = (0..5)
        .map(|n| Attempt::new(BASE_ID + n, &format!("g{n}"), ago(3600 - n * 60), false))
        .collect();
    let fake = Fake::start(attempts).await;
    fake.set_mode(Mode::RateLimitAfter(2));
    let dir = tempfile::tempdir().unwrap();
    let db = new_db(dir.path());
    let config = config_at(&db, &github_source(&fake.url()));

    let first = pass(&config, "github", false).await;
    assert!(first.rate_limited, "{first:?}");
    assert!(!first.complete);
    assert!(first.error.unwrap().contains("rate limit"));
    assert_eq!(fake.posts(), vec![BASE_ID, BASE_ID + 1]);
    assert_eq!(query_i64(&db, "SELECT count(*) FROM catchup_state"), 0);

    fake.set_mode(Mode::Normal);
    let second = pass(&config, "github", false).await;
    assert!(second.complete, "{second:?}");
    assert_eq!(second.skipped.asked_before, 2);
    assert_eq!(
        fake.posts(),
        (0..5).map(|n| BASE_ID + n).collect::<Vec<_>>(),
        "each attempt asked for once"
    );
    assert_eq!(query_i64(&db, "SELECT count(*) FROM catchup_state"), 1);
    assert_eq!(
        query_i64(
            &db,
            "SELECT count(*) FROM redelivery_requests WHERE outcome = 'asked'"
        ),
        5
    );
}

#[tokio::test]
async fn short_rate_limits_are_waited_out_and_the_pass_goes_on() {
    let attempts = (0..4)
        .map(|n| Attempt::new(BASE_ID + n, &format!("s{n}"), ago(3600 - n * 60), false))
        .collect();
    let fake = Fake::start(attempts).await;
    fake.set_mode(Mode::RetryAfterOnce(2));
    let dir = tempfile::tempdir().unwrap();
    let db = new_db(dir.path());
    // And the primary limit, spent for a second while listing.
    fake.inner.lock().unwrap().list_throttle = vec![2];
    let report = pass(
        &config_at(&db, &github_source(&fake.url())),
        "github",
        false,
    )
    .await;
    assert!(report.complete, "{report:?}");
    assert!(fake.inner.lock().unwrap().retried);
    assert_eq!(
        fake.inner.lock().unwrap().list_requests,
        3,
        "page 2 read again"
    );
    assert_eq!(
        fake.posts(),
        (0..4).map(|n| BASE_ID + n).collect::<Vec<_>>(),
        "each once, the third after the wait"
    );
}

#[tokio::test]
async fn an_app_hook_is_reached_with_a_fresh_rs256_jwt() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("app.pem");
    let public = dir.path().join("app.pub.pem");
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .output()
            .expect("the test needs the openssl command to make a throwaway RSA key");
        assert!(out.status.success(), "{out:?}");
    };
    let (k, p) = (key.to_str().unwrap(), public.to_str().unwrap());
    openssl(&["genrsa", "-traditional", "-out", k, "2048"]);
    openssl(&["rsa", "-in", k, "-pubout", "-out", p]);

    let fake = Fake::start(vec![
        Attempt::new(BASE_ID + 1, "app-failed", ago(120), false),
        Attempt::new(BASE_ID + 2, "app-ok", ago(60), true),
        Attempt::new(BASE_ID + 3, "app-failed-too", ago(30), false),
    ])
    .await;
    fake.check_jwt(std::fs::read(&public).unwrap(), 123_456);
    let db = new_db(dir.path());
    let sources = format!(
        "{GITHUB_SOURCE}\n[sources.github_redelivery]\napp_id = 123456\nprivate_key = \"file:{k}\"\napi_url = \"{}\"\npace = \"10ms\"\n",
        fake.url()
    );
    let report = pass(&config_at(&db, &sources), "github", false).await;
    assert!(report.complete, "{report:?}");
    fake.assert_no_problems();
    assert_eq!(fake.posts(), vec![BASE_ID + 1, BASE_ID + 3]);
    let inner = fake.inner.lock().unwrap();
    assert_eq!(inner.jwt_checks, inner.requests.len());
    assert!(inner.requests[0].starts_with("GET /app/hook/deliveries?per_page=100"));
    assert!(inner.requests.iter().any(|r| r.contains("cursor=")));
}

#[tokio::test]
async fn event_types_limit_what_is_asked_and_a_dry_run_asks_nothing() {
    let fake = Fake::start(vec![
        Attempt::new(BASE_ID + 1, "a-push", ago(300), false),
        Attempt::new(BASE_ID + 2, "an-issue", ago(200), false).event("issues"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let db = new_db(dir.path());
    let sources = format!("{}event_types = [\"issues\"]\n", github_source(&fake.url()));
    let config = config_at(&db, &sources);
    let dry = pass(&config, "github", true).await;
    assert!(fake.posts().is_empty());
    assert_eq!(dry.skipped.filtered, 1);
    assert_eq!(dry.requests.len(), 1);
    assert_eq!(dry.requests[0].outcome, "would_ask");
    assert!(dry.to_string().contains("would ask: an-issue"), "{dry}");
    assert_eq!(query_i64(&db, "SELECT count(*) FROM catchup_state"), 0);

    let real = pass(&config, "github", false).await;
    assert!(real.complete);
    assert_eq!(fake.posts(), vec![BASE_ID + 2]);
}

#[tokio::test]
async fn a_pass_held_elsewhere_is_reported_busy_and_an_expired_lock_is_taken_over() {
    let fake = Fake::start(vec![Attempt::new(BASE_ID, "g", ago(60), false)]).await;
    let dir = tempfile::tempdir().unwrap();
    let db = new_db(dir.path());
    let config = config_at(&db, &github_source(&fake.url()));
    let hold = |expires_at: i64| {
        Connection::open(&db)
            .unwrap()
            .execute(
                "INSERT OR REPLACE INTO job_locks (name, holder, expires_at)
                 VALUES ('catchup:github:github_redelivery', 'a-server', ?1)",
                [expires_at],
            )
            .unwrap();
    };
    hold(hookbox::support::clock::now_ms() + 60_000);
    let busy = pass(&config, "github", false).await;
    assert!(busy.busy && busy.run_id.is_none(), "{busy:?}");
    assert!(busy.to_string().contains("busy"), "{busy}");
    assert!(fake.posts().is_empty());

    // The holder died: its lock ran out.
    hold(hookbox::support::clock::now_ms() - 1);
    let report = pass(&config, "github", false).await;
    assert!(report.complete, "{report:?}");
    assert_eq!(fake.posts(), vec![BASE_ID]);
}

#[tokio::test]
async fn the_lock_of_a_pass_whose_process_died_is_released_at_once_not_after_its_ttl() {
    let fake = Fake::start(vec![Attempt::new(BASE_ID, "g", ago(60), false)]).await;
    let dir = tempfile::tempdir().unwrap();
    let db = new_db(dir.path());
    let config = config_at(&db, &github_source(&fake.url()));
    let ns = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let hold = |holder: String| {
        Connection::open(&db)
            .unwrap()
            .execute(
                "INSERT OR REPLACE INTO job_locks (name, holder, expires_at)
                 VALUES ('catchup:github:github_redelivery', ?1, ?2)",
                rusqlite::params![holder, hookbox::support::clock::now_ms() + 600_000],
            )
            .unwrap();
    };
    // Held by a live process of this namespace (this test): busy.
    hold(format!("{}@{}:01", std::process::id(), ns.display()));
    assert!(pass(&config, "github", false).await.busy);
    // Held, for 10 more minutes, by a process that was killed: taken.
    let mut killed = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    killed.kill().unwrap();
    killed.wait().unwrap();
    hold(format!("{}@{}:02", killed.id(), ns.display()));
    let report = pass(&config, "github", false).await;
    assert!(!report.busy && report.complete, "{report:?}");
    assert_eq!(fake.posts(), vec![BASE_ID]);
}
