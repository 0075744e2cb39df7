//! The simulated outage, through the real binary: while hookbox was down,
//! GitHub's deliveries failed and Stripe's events went unanswered. Started
//! again, hookbox's start-up catch-up asks the fake GitHub to redeliver
//! (which it does, to hookbox) and fetches from the fake Stripe; every
//! missed event ends in the inbox once. Then `hookbox catch-up --dry-run`
//! runs beside the server, prints what it would ask for, and asks nothing.

use std::time::Duration;

use super::fake::{Attempt, BASE_ID, Fake, HOOK_ID, STRIPE_KEY, TOKEN};
use super::stripe::{STRIPE_SECRET, event};
use super::{ago, query_i64, wait_for_count};
use crate::helpers::{ChildServer, GITHUB_SECRET, hookbox};

/// The GitHub source, with a redelivery job, and the Stripe source, with a
/// backfill, both asking the fake at `fake`.
fn sources(fake: &str) -> String {
    format!(
        r#"[[sources]]
name = "github"
kind = "github"
secrets = ["{GITHUB_SECRET}"]

[sources.github_redelivery]
repo = "acme/shop"
hook_id = {HOOK_ID}
token = "{TOKEN}"
api_url = "{fake}"
pace = "10ms"

[[sources]]
name = "stripe"
kind = "stripe"
secrets = ["{STRIPE_SECRET}"]
stripe_backfill = {{ api_key = "{STRIPE_KEY}", api_url = "{fake}" }}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_outage_one_catch_up_pass_brings_every_missed_event_into_the_inbox() {
    let dir = tempfile::tempdir().unwrap();
    // What happened while hookbox was down.
    let missed: Vec<String> = (0..6).map(|n| format!("missed-{n}")).collect();
    let mut attempts: Vec<Attempt> = missed
        .iter()
        .enumerate()
        .map(|(n, g)| Attempt::new(BASE_ID + n as i64, g, ago(7200 - n as i64 * 600), false))
        .collect();
    attempts.push(Attempt::new(BASE_ID + 99, "before-outage", ago(9000), true));
    let fake = Fake::start(attempts).await;
    let stripe_missed = ["evt_a", "evt_b", "evt_c"];
    for (n, id) in stripe_missed.iter().enumerate() {
        fake.add_stripe_event(event(id, ago(3600 * (n as i64 + 1))));
    }

    let db = dir.path().join("hookbox.db");
    let mut server =
        ChildServer::spawn_ready_with(dir.path(), &db, &sources(&fake.url()), "", 0, &[], |addr| {
            fake.redeliver_to(format!("http://{addr}/hooks/github"), GITHUB_SECRET)
        })
        .await;
    let config = dir.path().join("hookbox.toml");
    wait_for_count(
        &db,
        "SELECT count(*) FROM events WHERE source = 'github'",
        6,
    )
    .await;
    wait_for_count(
        &db,
        "SELECT count(*) FROM events WHERE source = 'stripe' AND origin = 'fetched'",
        3,
    )
    .await;
    for guid in &missed {
        let sql =
            format!("SELECT count(*) FROM events WHERE delivery_id = '{guid}' AND origin = 'push'");
        assert_eq!(query_i64(&db, &sql), 1, "{guid}");
    }
    for id in stripe_missed {
        let sql = format!("SELECT count(*) FROM events WHERE delivery_id = '{id}'");
        assert_eq!(query_i64(&db, &sql), 1, "{id}");
    }
    assert_eq!(
        fake.posts(),
        (0..6).map(|n| BASE_ID + n).collect::<Vec<_>>(),
        "one redelivery per missed event, oldest first"
    );
    fake.assert_no_problems();
    wait_for_count(
        &db,
        "SELECT count(*) FROM catchup_state WHERE job IN ('github_redelivery', 'stripe_backfill')",
        2,
    )
    .await;

    // A new failure; the CLI's dry run beside the running server shows it
    // and asks nothing.
    fake.add(Attempt::new(BASE_ID + 500, "late-failure", ago(10), false));
    let out = hookbox()
        .args(["catch-up", "github", "--dry-run", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("github github_redelivery (dry run)"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "would ask: late-failure attempt {}",
            BASE_ID + 500
        )),
        "{stdout}"
    );
    assert!(stdout.contains("result: complete"), "{stdout}");
    assert_eq!(fake.posts().len(), 6, "a dry run asks nothing");

    // SIGTERM stops the server cleanly with the scheduler in it.
    let exit = server.terminate(Duration::from_secs(15)).await;
    assert_eq!(exit.code(), Some(0));
}
