//! Rejected requests: every refusal on `/hooks/*` is recorded with its
//! reason, status, client, header names and sizes, never with a secret, a
//! header value or a body; the table stays at its bound under a flood;
//! `GET /api/rejections` pages and filters behind the admin token; the
//! dashboard page explains each reason (in Chromium, with a screenshot);
//! twenty forged requests make one `rejections` alert; a database the
//! release wrote (schema 10) gets the table.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::helpers::*;

/// A recognisable signature value and body marker: neither may be kept.
const SIGNATURE_MARKER: &str =
    "sha256=5ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7";
const BODY_MARKER: &str = "body-marker-do-not-keep-41f7";
const TOKEN_MARKER: &str = "token-marker-do-not-keep-9c2e";

const STRIPE_SECRET: &str = "whsec_rejections_test";

/// Two secrets on `github` (a rotation), a small body limit on it, a
/// stripe source for the clock, one source only 10.0.0.0/8 may post to;
/// the peer (loopback) is a trusted proxy, so each request names its
/// client in `X-Forwarded-For`, and three failures block a client.
fn sources() -> String {
    format!(
        r#"
[[sources]]
name = "github"
kind = "github"
secrets = ["{GITHUB_SECRET}", "old-secret"]
max_body_bytes = 1024

[[sources]]
name = "stripe"
kind = "stripe"
secrets = ["{STRIPE_SECRET}"]

[[sources]]
name = "locked"
kind = "github"
secrets = ["{GITHUB_SECRET}"]
allow_ips = ["10.0.0.0/8"]
"#
    )
}

const EDGE: &str = "trusted_proxies = [\"127.0.0.0/8\"]\n[edge]\nmax_failures = 3\n";

async fn spawn() -> TestApp {
    TestApp::spawn_with(&sources(), EDGE).await
}

/// A POST to `/hooks/{source}` from `client` (via the trusted proxy).
fn post(app: &TestApp, source: &str, client: &str) -> reqwest::RequestBuilder {
    app.client
        .post(app.url(&format!("/hooks/{source}")))
        .header("x-forwarded-for", client)
}

/// The newest rejections (up to 500), once at least `n` are recorded.
async fn wait_for_rejections(app: &TestApp, path: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let page = json(app.admin_get(path).await).await;
        let rows = page["rejections"].as_array().unwrap().clone();
        // A row stands for its first refusal and the repeats folded in.
        let counted: usize = rows
            .iter()
            .map(|r| 1 + r["repeats"].as_u64().unwrap() as usize)
            .sum();
        if counted >= n {
            return rows;
        }
        assert!(
            Instant::now() < deadline,
            "{counted} of {n} rejections recorded: {page}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn names(row: &Value) -> Vec<&str> {
    row["header_names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect()
}

fn stripe_signature(t: i64, body: &[u8]) -> String {
    let mut signed = format!("{t}.").into_bytes();
    signed.extend_from_slice(body);
    format!(
        "t={t},v1={}",
        hex::encode(hmac_sha256(STRIPE_SECRET.as_bytes(), &signed))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_kind_of_refusal_is_recorded_with_its_reason_status_client_header_names_and_sizes() {
    let app = spawn().await;
    let forged = format!(r#"{{"zen":"{BODY_MARKER}"}}"#);
    let sent = [
        // 401: a signature neither secret made.
        post(&app, "github", "198.51.100.1")
            .header("content-type", "application/json")
            .header("x-github-event", "push")
            .header("x-github-delivery", "forged-1")
            .header("x-hub-signature-256", SIGNATURE_MARKER)
            .body(forged.clone()),
        // 401: no signature at all.
        post(&app, "github", "198.51.100.2")
            .header("x-github-delivery", "unsigned")
            .body("{}"),
        // 401: signed right, seven minutes ago.
        {
            let body = br#"{"id":"evt_old","type":"charge.succeeded"}"#;
            post(&app, "stripe", "198.51.100.3")
                .header("content-type", "application/json")
                .header("stripe-signature", stripe_signature(now_secs() - 420, body))
                .body(body.to_vec())
        },
        // 413: declared over the limit, refused before the body is read.
        post(&app, "github", "198.51.100.4")
            .header("content-type", "application/octet-stream")
            .body(vec![b'x'; 4096]),
        // 404: a name no source answers.
        post(&app, "githib", "198.51.100.5").body("{}"),
        // 403: not in allow_ips.
        post(&app, "locked", "198.51.100.6").body("{}"),
        // 400: the trusted proxy's header names no client.
        post(&app, "github", "not-an-address").body("{}"),
        // 400: signed right, but no delivery id.
        {
            let body = br#"{"zen":"no id"}"#;
            post(&app, "github", "198.51.100.8")
                .header("x-github-event", "push")
                .header("x-hub-signature-256", github_signature(GITHUB_SECRET, body))
                .body(body.to_vec())
        },
    ];
    let mut statuses = Vec::new();
    for request in sent {
        statuses.push(request.send().await.unwrap().status().as_u16());
    }
    assert_eq!(statuses, [401, 401, 401, 413, 404, 403, 400, 400]);
    // 429: a client that failed three times is blocked.
    for i in 0..3 {
        let r = post(&app, "github", "203.0.113.9")
            .header("x-hub-signature-256", "sha256=00")
            .body(format!("{{\"n\":{i}}}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
    }
    let blocked = post(&app, "github", "203.0.113.9").body("{}").send().await;
    assert_eq!(blocked.unwrap().status(), 429);

    // Twelve refusals in ten rows: the blocked client's three 401s fold.
    let rows = wait_for_rejections(&app, "/api/rejections?limit=100", 12).await;
    assert_eq!(rows.len(), 10, "{rows:#?}");
    let by_client = |client: &str| -> &Value {
        rows.iter()
            .find(|r| r["client"] == client)
            .unwrap_or_else(|| panic!("no row from {client}: {rows:#?}"))
    };

    let bad = by_client("198.51.100.1");
    assert_eq!(
        (&bad["source"], &bad["status"], &bad["reason"]),
        (&"github".into(), &401.into(), &"invalid_signature".into())
    );
    assert_eq!(bad["detail"]["secrets"], 2);
    assert_eq!(bad["body_bytes"], forged.len());
    assert_eq!(bad["content_type"], "application/json");
    for name in [
        "content-type",
        "x-github-event",
        "x-github-delivery",
        "x-hub-signature-256",
        "x-forwarded-for",
    ] {
        assert!(names(bad).contains(&name), "{name} in {bad}");
    }

    assert_eq!(by_client("198.51.100.2")["reason"], "missing_signature");

    let old = by_client("198.51.100.3");
    assert_eq!(
        (&old["source"], &old["reason"]),
        (&"stripe".into(), &"timestamp_out_of_tolerance".into())
    );
    let age = old["detail"]["age_secs"].as_i64().unwrap();
    assert!((420..=425).contains(&age), "{old}");
    assert_eq!(old["detail"]["tolerance_secs"], 300);
    assert!(names(old).contains(&"stripe-signature"));

    let big = by_client("198.51.100.4");
    assert_eq!(
        (&big["status"], &big["reason"]),
        (&413.into(), &"body_too_large".into())
    );
    assert_eq!(big["body_bytes"], 4096);
    assert_eq!(big["detail"]["max_body_bytes"], 1024);
    assert_eq!(big["content_type"], "application/octet-stream");

    let unknown = by_client("198.51.100.5");
    assert_eq!(
        (&unknown["source"], &unknown["status"], &unknown["reason"]),
        (&"githib".into(), &404.into(), &"unknown_source".into())
    );

    let locked = by_client("198.51.100.6");
    assert_eq!(
        (&locked["source"], &locked["status"], &locked["reason"]),
        (&"locked".into(), &403.into(), &"forbidden_address".into())
    );
    assert_eq!(locked["detail"]["cause"], "not_allowed");

    let proxy = rows
        .iter()
        .find(|r| r["reason"] == "malformed_forwarding_header")
        .expect("the unreadable forwarding header");
    assert_eq!(
        (&proxy["status"], &proxy["client"]),
        (&400.into(), &Value::Null)
    );

    let no_id = by_client("198.51.100.8");
    assert_eq!(
        (&no_id["status"], &no_id["reason"]),
        (&400.into(), &"missing_delivery_id".into())
    );

    // Its three failures fold into one row, the 429 has its own.
    let from_blocked: Vec<&Value> = rows
        .iter()
        .filter(|r| r["client"] == "203.0.113.9")
        .collect();
    assert_eq!(from_blocked.len(), 2, "{from_blocked:?}");
    let limited = from_blocked[0];
    assert_eq!(
        (&limited["status"], &limited["reason"], &limited["repeats"]),
        (&429.into(), &"too_many_failures".into(), &0.into())
    );
    assert!(limited["detail"]["retry_after_secs"].as_u64().unwrap() > 0);
    let failures = from_blocked[1];
    assert_eq!(
        (
            &failures["status"],
            &failures["reason"],
            &failures["repeats"]
        ),
        (&401.into(), &"invalid_signature".into(), &2.into())
    );
    let (first, last) = (failures["at"].as_i64(), failures["last_at"].as_i64());
    assert!(last >= first, "{failures}");

    // Newest first, and each row's time is now-ish.
    let ids: Vec<i64> = rows.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "{ids:?}");
    let now = now_secs() * 1000;
    assert!(
        rows.iter()
            .all(|r| (now - r["at"].as_i64().unwrap()).abs() < 60_000)
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_signature_or_body_reaches_the_table_the_api_or_the_dashboard() {
    let app = spawn().await;
    for source in ["github", "stripe", "nowhere"] {
        let r = post(&app, source, "198.51.100.20")
            .header("content-type", "application/json")
            .header("x-github-delivery", "forged")
            .header("x-hub-signature-256", SIGNATURE_MARKER)
            .header(
                "stripe-signature",
                format!("t=1,v1={}", &SIGNATURE_MARKER[7..]),
            )
            .header("authorization", format!("Bearer {TOKEN_MARKER}"))
            .body(format!(r#"{{"secret":"{BODY_MARKER}"}}"#))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_client_error(), "{}", r.status());
    }
    let rows = wait_for_rejections(&app, "/api/rejections", 3).await;
    assert!(rows.iter().all(|r| names(r).contains(&"authorization")));

    let forbidden = [
        &SIGNATURE_MARKER[7..],
        &SIGNATURE_MARKER[7..23],
        BODY_MARKER,
        TOKEN_MARKER,
        GITHUB_SECRET,
        STRIPE_SECRET,
        "old-secret",
    ];
    let table: String = app
        .db()
        .prepare(
            "SELECT coalesce(at,'') || source || coalesce(client,'') || status || reason
                    || header_names || coalesce(body_bytes,'') || coalesce(content_type,'')
                    || coalesce(detail,'')
             FROM rejections",
        )
        .unwrap()
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let api = app.admin_get("/api/rejections").await.text().await.unwrap();
    let cookie = dashboard_cookie(app.admin_url("/login")).await;
    let page = app
        .client
        .get(app.admin_url("/rejections"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    assert!(page.contains("x-hub-signature-256") && page.contains("nowhere"));
    for (what, text) in [("table", &table), ("API", &api), ("dashboard", &page)] {
        assert!(text.contains("authorization"), "{what}: {text}");
        for secret in forbidden {
            assert!(!text.contains(secret), "{secret} in the {what}: {text}");
        }
    }
    app.shutdown().await;
}

/// Sends `n` forged requests to `github` over `concurrency` connections,
/// all from this test's one address: they fold into a few rows.
async fn flood(app: &TestApp, n: usize, concurrency: usize) {
    let github = std::sync::Arc::new(|_| "github".to_owned());
    flood_to(app, n, concurrency, github, &[401, 429]).await;
}

/// Sends `n` forged requests over `concurrency` connections, request `i`
/// to `/hooks/{path(i)}`, each answered one of `statuses`.
async fn flood_to(
    app: &TestApp,
    n: usize,
    concurrency: usize,
    path: std::sync::Arc<dyn Fn(usize) -> String + Send + Sync>,
    statuses: &'static [u16],
) {
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, base, next) = (app.client.clone(), app.url("/hooks/"), next.clone());
            let path = path.clone();
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let r = client
                        .post(format!("{base}{}", path(i)))
                        .header("x-hub-signature-256", "sha256=00")
                        .body("{}")
                        .send()
                        .await
                        .unwrap();
                    assert!(statuses.contains(&r.status().as_u16()), "{}", r.status());
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

/// The count of `hookbox_rejections_dropped_total`.
async fn dropped(app: &TestApp) -> u64 {
    let metrics = app.admin_get("/metrics").await.text().await.unwrap();
    let dropped = metrics
        .lines()
        .find(|l| l.starts_with("hookbox_rejections_dropped_total "))
        .unwrap_or_else(|| panic!("no dropped counter in\n{metrics}"));
    dropped.rsplit(' ').next().unwrap().parse().unwrap()
}

fn table_span(app: &TestApp) -> (i64, i64, i64) {
    app.db()
        .query_row(
            "SELECT count(*), coalesce(min(id), 0), coalesce(max(id), 0) FROM rejections",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_one_address_folds_into_a_few_rows_that_count_every_refusal() {
    const SENT: i64 = 3_000;
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    flood(&app, SENT as usize, 16).await;
    let counted = |app: &TestApp| -> (i64, i64) {
        app.db()
            .query_row(
                "SELECT count(*), coalesce(sum(1 + repeats), 0) FROM rejections",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    let (rows, total) = loop {
        let (rows, total) = counted(&app);
        if total + dropped(&app).await as i64 >= SENT {
            break (rows, total);
        }
        assert!(
            Instant::now() < deadline,
            "{total} refusals counted of {SENT}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(total + dropped(&app).await as i64, SENT);
    // 401s until the address is blocked, then 429s: a row for each per
    // 10 s window (a slow machine may take more than one window).
    let span_ms: i64 = app
        .db()
        .query_row(
            "SELECT max(coalesce(last_at, at)) - min(at) FROM rejections",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let windows = 1 + span_ms / 10_000;
    assert!(
        (2..=2 * (windows + 1)).contains(&rows),
        "{rows} rows for {total} refusals over {span_ms} ms"
    );
    let page = app
        .admin_get("/api/rejections")
        .await
        .json::<Value>()
        .await
        .unwrap();
    let listed = page["rejections"].as_array().unwrap();
    assert_eq!(listed.len() as i64, rows);
    let mut shown = 0;
    for r in listed {
        shown += 1 + r["repeats"].as_i64().unwrap();
        if r["repeats"].as_i64().unwrap() > 0 {
            assert!(
                r["last_at"].as_i64().unwrap() >= r["at"].as_i64().unwrap(),
                "{r}"
            );
        }
    }
    assert_eq!(shown, total);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_stays_at_its_bound_of_10000_under_a_flood_and_keeps_the_newest() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    // In rounds, so that each is flushed before the next: a flood faster
    // than the buffer drains is dropped and counted, not recorded. Each
    // request names a source of its own (404), so none folds into another.
    let mut recorded = 0;
    for round in 0..6 {
        let path = std::sync::Arc::new(move |i| format!("flood-{round}-{i}"));
        flood_to(&app, 2_000, 16, path, &[404]).await;
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let (n, _, _) = table_span(&app);
            if n >= (recorded + 2_000).min(10_000) {
                recorded = n;
                break;
            }
            assert!(Instant::now() < deadline, "{n} rows after a round");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // The newest is kept: a last, different refusal.
    let last = app
        .client
        .post(app.url("/hooks/the-last-one"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(last.status(), 404);
    let newest = wait_for_rejections(&app, "/api/rejections?source=the-last-one", 1).await;
    let (n, min, max) = table_span(&app);
    assert_eq!(n, 10_000);
    assert_eq!(max - min + 1, 10_000, "the newest 10,000 ids, no gap");
    assert_eq!(newest[0]["id"], max);
    let dropped = dropped(&app).await;
    assert!(
        max as u64 + dropped >= 12_001,
        "every refusal was recorded or counted as dropped ({max} ids, {dropped} dropped)"
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_go_newest_first_by_source_behind_the_admin_token() {
    let app = spawn().await;
    for i in 0..5 {
        for source in ["alpha", "beta"] {
            // Each from an address of its own: repeats of one would fold.
            let r = post(&app, source, &format!("198.51.100.{i}"))
                .body("{}")
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 404);
        }
    }
    wait_for_rejections(&app, "/api/rejections", 10).await;
    let mut seen = Vec::new();
    let mut path = "/api/rejections?source=alpha&limit=2".to_owned();
    loop {
        let page = json(app.admin_get(&path).await).await;
        let rows = page["rejections"].as_array().unwrap();
        assert!(rows.len() <= 2);
        assert!(rows.iter().all(|r| r["source"] == "alpha"), "{page}");
        seen.extend(rows.iter().map(|r| r["id"].as_i64().unwrap()));
        match page["next_before"].as_i64() {
            Some(before) => path = format!("/api/rejections?source=alpha&limit=2&before={before}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 5, "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0] > w[1]), "{seen:?}");
    let all = json(app.admin_get("/api/rejections").await).await;
    assert_eq!(all["rejections"].as_array().unwrap().len(), 10);
    assert_eq!(all["next_before"], Value::Null);

    for bad in [
        "limit=0",
        "limit=501",
        "before=x",
        "before=-1",
        "colour=red",
    ] {
        let r = app.admin_get(&format!("/api/rejections?{bad}")).await;
        assert_eq!(r.status(), 400, "{bad}");
        assert_eq!(json(r).await["error"], "invalid_filter");
    }
    let anonymous = app
        .client
        .get(app.admin_url("/api/rejections"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    let wrong = app
        .client
        .get(app.admin_url("/api/rejections"))
        .bearer_auth("not-the-token")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    // The dashboard page wants a session, not the API token.
    let page = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(app.admin_url("/rejections"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 303);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_forged_requests_within_the_window_make_one_alert_naming_the_source() {
    let receiver = Downstream::start(|_, _| Reply::status(200)).await;
    let alerts = format!(
        "\n[[alerts]]\nurl = \"{}\"\nformat = \"json\"\nsigning_secret = \"{SIGNING_SECRET}\"\non = [\"rejections\"]\n",
        receiver.url()
    );
    let app = TestApp::spawn(&format!("{GITHUB_SOURCE}{alerts}")).await;
    for i in 0..19 {
        let r = app
            .client
            .post(app.url("/hooks/github"))
            .header("x-hub-signature-256", SIGNATURE_MARKER)
            .body(format!("{{\"n\":{i}}}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
    }
    // Nineteen are below the threshold (20): no message.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(receiver.hits().len(), 0);
    let r = app
        .client
        .post(app.url("/hooks/github"))
        .header("x-hub-signature-256", SIGNATURE_MARKER)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let hits = receiver.wait_for_hits(1).await;
    let message: Value = serde_json::from_slice(&hits[0].body).unwrap();
    let text = message.to_string();
    assert!(
        text.contains("Source github is refusing requests"),
        "{text}"
    );
    assert_eq!(message["data"]["details"]["source"], "github", "{text}");
    assert_eq!(message["data"]["details"]["refusals"], 20, "{text}");
    assert!(!text.contains(&SIGNATURE_MARKER[7..]), "{text}");
    // One message: more refusals while it holds do not make another.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(receiver.hits().len(), 1);
    // And all twenty are in the table.
    let rows = wait_for_rejections(&app, "/api/rejections?source=github", 20).await;
    assert!(rows.iter().all(|r| r["reason"] == "invalid_signature"));
    app.shutdown().await;
}

/// Written by release 329aaad (schema version 10), before this table.
const FIXTURE_V10: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/release-v10.db");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_the_release_wrote_gets_the_table_and_records_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    std::fs::copy(FIXTURE_V10, &db).unwrap();
    let events: i64 = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    let app = TestApp::spawn_in(dir, GITHUB_SOURCE, "").await;
    assert_eq!(
        app.count("PRAGMA user_version"),
        hookbox::store::schema::SCHEMA_VERSION
    );
    assert_eq!(app.count("SELECT count(*) FROM events"), events);
    let r = app
        .client
        .post(app.url("/hooks/github"))
        .header("x-hub-signature-256", SIGNATURE_MARKER)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let rows = wait_for_rejections(&app, "/api/rejections", 1).await;
    assert_eq!(rows[0]["reason"], "invalid_signature");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_the_rejected_requests_page_explains_each_reason_in_words() {
    use crate::dashboard::browser::{
        FIND_WAIT, browser_available, click_and_wait, connect, screenshot, start_driver, text_of,
    };
    use fantoccini::Locator;
    if !browser_available() {
        return;
    }
    let app = spawn().await;
    let forged = post(&app, "github", "198.51.100.1")
        .header("content-type", "application/json")
        .header("x-github-event", "push")
        .header("x-github-delivery", "forged-1")
        .header("x-hub-signature-256", SIGNATURE_MARKER)
        .body(format!(r#"{{"zen":"{BODY_MARKER}"}}"#));
    let body = br#"{"id":"evt_old","type":"charge.succeeded"}"#;
    let stale = post(&app, "stripe", "198.51.100.3")
        .header("content-type", "application/json")
        .header("stripe-signature", stripe_signature(now_secs() - 420, body))
        .body(body.to_vec());
    let big = post(&app, "github", "198.51.100.4").body(vec![b'x'; 4096]);
    let unknown = post(&app, "githib", "198.51.100.5").body("{}");
    let locked = post(&app, "locked", "198.51.100.6").body("{}");
    for r in [locked, unknown, big, stale, forged] {
        assert!(r.send().await.unwrap().status().is_client_error());
    }
    // The unknown name twice more: counted in its row.
    for _ in 0..2 {
        let again = post(&app, "githib", "198.51.100.5").body("{}");
        assert_eq!(again.send().await.unwrap().status(), 404);
    }
    wait_for_rejections(&app, "/api/rejections", 7).await;

    let driver = start_driver().await;
    let browser = connect(&driver).await;
    browser.goto(&app.admin_url("/login")).await.unwrap();
    let field = browser
        .wait()
        .at_most(FIND_WAIT)
        .for_element(Locator::Css("input[name=token]"))
        .await
        .unwrap();
    field.send_keys(ADMIN_TOKEN).await.unwrap();
    click_and_wait(&browser, Locator::Css("button[type=submit]")).await;
    click_and_wait(&browser, Locator::LinkText("Rejected requests")).await;
    assert_eq!(text_of(&browser, "h1").await, "Rejected requests");
    let table = text_of(&browser, "table").await;
    for words in [
        "The signature matched none of the 2 secrets",
        "a proxy that re-encodes JSON",
        "The timestamp was 7 minutes old; the tolerance is 5 minutes",
        "check the server's clock",
        "The body (4.0 KiB) is over the source's limit of 1.0 KiB",
        "No source named \u{201c}githib\u{201d} is configured",
        "198.51.100.6 is not in the source's allow_ips",
        "x-hub-signature-256",
        "and 2 more like it, the last at",
    ] {
        assert!(table.contains(words), "{words:?} not in\n{table}");
    }
    for secret in [&SIGNATURE_MARKER[7..], BODY_MARKER, GITHUB_SECRET] {
        assert!(
            !browser.source().await.unwrap().contains(secret),
            "{secret}"
        );
    }
    // Each reason links to the troubleshooting docs.
    let links = browser
        .find_all(Locator::LinkText("Troubleshooting →"))
        .await
        .unwrap();
    assert_eq!(links.len(), 5);
    // Newest first: the forged signature, then the stale timestamp.
    for (link, anchor) in links.iter().zip([
        "troubleshooting.md#troubleshooting-signature-failures",
        "troubleshooting.md#troubleshooting-signature-failures",
        "troubleshooting.md#troubleshooting-refused-requests",
        "troubleshooting.md#troubleshooting-refused-requests",
        "running/edge.md",
    ]) {
        let href = link.attr("href").await.unwrap().unwrap();
        assert!(href.ends_with(anchor), "{href}");
    }
    assert!(
        text_of(&browser, "main > p")
            .await
            .contains("the newest 10,000 are kept")
    );
    screenshot(&browser, "rejections").await;

    // The source link filters the page.
    click_and_wait(&browser, Locator::LinkText("githib")).await;
    let filtered = text_of(&browser, "table").await;
    assert!(
        filtered.contains("githib") && !filtered.contains("stripe"),
        "{filtered}"
    );
    browser.close().await.unwrap();
    drop(driver);
    app.shutdown().await;
}
