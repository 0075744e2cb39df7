//! `kill -9` of the real binary while deliveries to several destinations
//! are in flight, then a restart on the same file: every destination gets
//! every event its filter takes at least once, and nothing else.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::helpers::*;
use crate::routes::*;

/// How long each url destination takes to answer, and each run of the
/// command destination (as `sleep` reads it).
const SLOW: Duration = Duration::from_millis(300);
const SLOW_RUN: &str = "0.3";

const EVENTS: usize = 24;

/// One event as sent.
struct Sent {
    delivery: String,
    event: &'static str,
    repo: String,
    git_ref: &'static str,
}

/// Whether destination `name`'s filter (below) takes `e`.
fn takes(name: &str, e: &Sent) -> bool {
    match name {
        "pushes" => e.event == "push",
        "acme" => e.repo.starts_with("acme/"),
        "deploy" => e.event == "push" && e.git_ref == "refs/heads/main",
        _ => unreachable!("{name}"),
    }
}

/// `(destination, how many it holds leased, how many it delivered)`.
fn lanes(db: &std::path::Path) -> Vec<(String, i64, i64)> {
    open(db)
        .prepare(
            "SELECT d.destination, count(l.token), count(*) FILTER (WHERE d.state = 'delivered')
             FROM deliveries AS d LEFT JOIN leases AS l ON l.delivery = d.id
             GROUP BY d.destination ORDER BY d.destination",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_deliveries_to_several_destinations_in_flight_loses_none_and_misroutes_none() {
    let pushes = Downstream::start(|_, _| Reply::status(204).after(SLOW)).await;
    let acme = Downstream::start(|_, _| Reply::status(204).after(SLOW)).await;
    let deploy = Recorder::create();
    let sources = routed_source(&[
        destination(
            "pushes",
            &[
                &url_destination(&pushes.url()),
                r#"events = ["push"]"#,
                QUICK_RETRIES,
            ],
        ),
        destination(
            "acme",
            &[
                &signed_url(&acme.url(), OTHER_SIGNING_SECRET),
                r#"when = { "/repository/full_name" = "acme/*" }"#,
                QUICK_RETRIES,
            ],
        ),
        destination(
            "deploy",
            &[
                &deploy.command(SLOW_RUN, &[]),
                r#"events = ["push"]"#,
                r#"when = { "/ref" = "refs/heads/main" }"#,
                QUICK_RETRIES,
            ],
        ),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let mut server = ChildServer::spawn_ready(dir.path(), &db, &sources, "", 0).await;

    // Six keys, two event types, two refs: each destination takes a part.
    let sent: Vec<Sent> = (0..EVENTS)
        .map(|n| Sent {
            delivery: format!("crash-{n:02}"),
            event: if n % 3 == 2 { "issues" } else { "push" },
            repo: format!("{}/r{}", if n % 2 == 0 { "acme" } else { "other" }, n % 3),
            git_ref: if n % 4 < 2 {
                "refs/heads/main"
            } else {
                "refs/heads/dev"
            },
        })
        .collect();
    // All at once, so that most are still to go at the kill.
    let mut posts = tokio::task::JoinSet::new();
    for e in &sent {
        let body = github_body(&e.repo, Some(e.git_ref));
        let (addr, event, delivery) = (server.addr, e.event, e.delivery.clone());
        posts.spawn(async move { post_github_event(addr, event, &delivery, &body).await });
    }
    posts.join_all().await;
    // Cut while each destination has delivered some and holds others. A
    // lane can be between two attempts at any moment, so the server is
    // frozen first and killed only if the frozen state is such a cut;
    // otherwise it goes on until the next one.
    let part_way = |lanes: &[(String, i64, i64)]| {
        lanes.len() == 3
            && lanes
                .iter()
                .all(|(_, leased, done)| *leased > 0 && *done > 0)
    };
    let cut = loop {
        eventually("every destination part way through", || {
            part_way(&lanes(&db)).then_some(())
        })
        .await;
        server.freeze();
        let cut = lanes(&db);
        if part_way(&cut) {
            server.kill9();
            break cut;
        }
        server.thaw();
    };
    eprintln!("at the kill, (destination, leased, delivered): {cut:?}");
    // What the killed process had settled; the rest is the restart's to do.
    let settled_before = all_deliveries(&db);

    let restarted = Instant::now();
    let server = ChildServer::spawn_ready(dir.path(), &db, &sources, "", 1).await;
    wait_until_settled(&db, PATIENCE * 2).await;

    // Per destination, `(every event it got, those the restarted server
    // sent)`. A request the killed process had made but not seen answered
    // counts only as received, not as delivered: the restart must send it.
    let url = |down: &Downstream| -> (BTreeSet<String>, BTreeSet<String>) {
        let id = |h: &Hit| h.header("x-github-delivery").to_owned();
        let hits = down.hits();
        let after = hits.iter().filter(|h| h.at >= restarted).map(id).collect();
        (hits.iter().map(id).collect(), after)
    };
    let runs = deploy.runs();
    let ran = |by: Option<u32>| -> BTreeSet<String> {
        runs.iter()
            .filter(|r| by.is_none_or(|pid| r.parent == pid))
            .map(|r| r.delivery().to_owned())
            .collect()
    };
    for (name, (got, after)) in [
        ("pushes", url(&pushes)),
        ("acme", url(&acme)),
        ("deploy", (ran(None), ran(Some(server.child.id())))),
    ] {
        let expected: BTreeSet<String> = sent
            .iter()
            .filter(|e| takes(name, e))
            .map(|e| e.delivery.clone())
            .collect();
        assert!(!expected.is_empty(), "{name} takes some");
        let before: BTreeSet<String> = settled_before
            .iter()
            .filter(|d| d.destination == name && d.state == "delivered")
            .map(|d| d.delivery_id.clone())
            .collect();
        assert!(before.is_subset(&got), "{name} got what was settled");
        let lost: Vec<&String> = expected
            .iter()
            .filter(|d| !before.contains(*d) && !after.contains(*d))
            .collect();
        let misrouted: Vec<&String> = got.difference(&expected).collect();
        assert!(
            lost.is_empty(),
            "lost at {name}: neither settled before the kill nor sent after the restart: {lost:?}"
        );
        assert!(misrouted.is_empty(), "{name} got {misrouted:?}");
        assert_eq!(
            routed_to(&db, name),
            expected.iter().cloned().collect::<Vec<_>>(),
            "{name}'s deliveries"
        );
        eprintln!(
            "{name}: {} settled before the kill, {} sent after the restart, of {}",
            before.len(),
            after.len(),
            expected.len()
        );
    }
    for d in all_deliveries(&db) {
        assert_eq!(d.state, "delivered", "{d:?}");
    }
    assert_eq!(
        open(&db)
            .query_row("SELECT count(*) FROM events", [], |r| r.get::<_, i64>(0))
            .unwrap(),
        EVENTS as i64
    );
    stop(server).await;
}
