//! What the real binary logs at its default level (`hookbox=info`): each
//! failed attempt, not each delivery, so a draining backlog does not run
//! past journald's rate limit (`RUST_LOG=hookbox=debug` shows deliveries);
//! and one line for a burst of refused requests or handshakes, not one
//! each.

use crate::helpers::*;

/// Every event succeeds but `refused`, which its destination answers 503.
fn refuse_one(delivery: &str, _: usize) -> Reply {
    if delivery == "refused" {
        Reply::status(503)
    } else {
        Reply::status(204)
    }
}

/// A delivery's own log line (target and message, as the text format
/// writes them).
const DELIVERED: &str = "attempt: delivered ";

/// The real binary on `dir/hookbox.db`, logging at `level`.
async fn serve(
    dir: &std::path::Path,
    sources: &str,
    server_extra: &str,
    level: &str,
    run: usize,
) -> ChildServer {
    let db = dir.join("hookbox.db");
    let env = [("RUST_LOG", level)];
    ChildServer::spawn_ready_with(dir, &db, sources, server_extra, run, &env, |_| {}).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_are_debug_lines_and_failed_attempts_are_logged_at_info() {
    let down = Downstream::start(refuse_one).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let sources = deliver_source("github", &url_destination(&down.url()), "5s", 2);

    let server = serve(dir.path(), &sources, "", "hookbox=info", 0).await;
    let mut delivered = Vec::new();
    for n in 0..20 {
        let body = repo_body("acme/widgets", n);
        let delivery = format!("ok-{n}");
        delivered
            .push(post_event(server.addr, "github", &delivery, "application/json", &body).await);
    }
    let body = repo_body("acme/widgets", 99);
    let refused = post_event(server.addr, "github", "refused", "application/json", &body).await;
    for id in delivered {
        wait_for_state(&db, id, "delivered").await;
    }
    wait_for_state(&db, refused, "dead").await;
    let log = server.output();
    assert!(!log.contains(DELIVERED), "{log}");
    let failed: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("attempt failed"))
        .collect();
    assert_eq!(failed.len(), 2, "{log}");
    assert!(
        failed[0].contains(" INFO ") && failed[0].contains("will retry"),
        "{}",
        failed[0]
    );
    assert!(
        failed[1].contains(" WARN ") && failed[1].contains("event is dead"),
        "{}",
        failed[1]
    );
    for line in failed {
        assert!(
            line.contains("status=503") && line.contains("destination=default"),
            "{line}"
        );
    }
    drop(server);

    // The same binary at debug writes the line the check above looks for.
    let server = serve(dir.path(), &sources, "", "hookbox=debug", 1).await;
    let body = repo_body("acme/widgets", 100);
    let id = post_event(server.addr, "github", "ok-debug", "application/json", &body).await;
    wait_for_state(&db, id, "delivered").await;
    let log = server.output();
    let line = log
        .lines()
        .find(|l| l.contains(DELIVERED))
        .unwrap_or_else(|| panic!("no delivery line at debug:\n{log}"));
    assert!(
        line.contains(" DEBUG ") && line.contains("status=204"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_forged_requests_is_one_log_line_and_every_refusal_is_still_counted() {
    let dir = tempfile::tempdir().unwrap();
    // Without the per-address failure limit, as when the flood comes from
    // many addresses.
    let no_limit = "[edge]\nmax_failures = 0";
    let server = serve(dir.path(), GITHUB_SOURCE, no_limit, "hookbox=info", 0).await;
    let client = reqwest::Client::new();
    let body = repo_body("acme/widgets", 1);
    const FORGED: usize = 30;
    for n in 0..FORGED {
        let status = client
            .post(server.url("/hooks/github"))
            .header("content-type", "application/json")
            .header("x-github-event", "push")
            .header("x-github-delivery", format!("forged-{n}"))
            .header(
                "x-hub-signature-256",
                github_signature("not-the-secret", &body),
            )
            .body(body.clone())
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 401);
    }
    let log = server.output();
    let refused: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("refused a delivery"))
        .collect();
    assert_eq!(refused.len(), 1, "{log}");
    assert!(
        refused[0].contains("reason=\"invalid_signature\"") && refused[0].contains("held_back=0"),
        "{}",
        refused[0]
    );
    let metrics = server.metrics().await;
    assert!(
        metrics.contains(&format!(
            "hookbox_received_total{{source=\"github\",outcome=\"rejected\",reason=\"invalid_signature\"}} {FORGED}"
        )),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_handshake_tokens_are_one_log_line_too() {
    let dir = tempfile::tempdir().unwrap();
    let sources = "[[sources]]\nname = \"meta\"\nkind = \"meta\"\nsecrets = [\"app-secret\"]\nverify_token = \"the-token\"\n";
    let server = serve(dir.path(), sources, "", "hookbox=info", 0).await;
    let client = reqwest::Client::new();
    for n in 0..5 {
        let url = server.url(&format!(
            "/hooks/meta?hub.mode=subscribe&hub.verify_token=guess-{n}&hub.challenge=c{n}"
        ));
        assert_eq!(client.get(url).send().await.unwrap().status(), 403);
    }
    let log = server.output();
    let refused: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("refused a handshake"))
        .collect();
    assert_eq!(refused.len(), 1, "{log}");
    assert!(refused[0].contains("held_back=0"), "{}", refused[0]);
}

/// A GitHub source `name` whose destinations (`[[sources.deliver]]`) are
/// pull destinations named `destinations`: what arrives waits there.
fn pull_source(name: &str, destinations: &[&str]) -> String {
    let mut toml = format!(
        "\n[[sources]]\nname = \"{name}\"\nkind = \"github\"\nsecrets = [\"{GITHUB_SECRET}\"]\n"
    );
    for d in destinations {
        toml += &format!(
            "[[sources.deliver]]\nname = \"{d}\"\npull = {{ token = \"a-pull-token-0123456789\" }}\n"
        );
    }
    toml
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_names_each_destination_gone_from_the_config_whose_deliveries_wait() {
    let dir = tempfile::tempdir().unwrap();
    let before = [
        pull_source("github", &["kept", "gone"]),
        pull_source("old", &["default"]),
    ]
    .concat();
    let mut server = serve(dir.path(), &before, "", "hookbox=info", 0).await;
    for n in 0..3 {
        post_event(
            server.addr,
            "github",
            &format!("gh-{n}"),
            "application/json",
            b"{}",
        )
        .await;
    }
    for n in 0..2 {
        post_event(
            server.addr,
            "old",
            &format!("old-{n}"),
            "application/json",
            b"{}",
        )
        .await;
    }
    assert!(server.terminate(PATIENCE).await.success());
    assert!(!server.output().contains("not in the config"));

    let server = serve(
        dir.path(),
        &pull_source("github", &["kept"]),
        "",
        "hookbox=info",
        1,
    )
    .await;
    let log = server.output();
    let orphans: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("deliveries wait at a destination that is not in the config"))
        .collect();
    assert_eq!(orphans.len(), 2, "{log}");
    for (source, destination, pending) in [("github", "gone", 3), ("old", "default", 2)] {
        let fields = [
            format!("source={source}"),
            format!("destination={destination}"),
            format!("pending={pending}"),
        ];
        let line = orphans
            .iter()
            .find(|l| fields.iter().all(|f| l.contains(f.as_str())))
            .unwrap_or_else(|| panic!("no line with {fields:?} in {orphans:#?}"));
        assert!(line.contains(" WARN "), "{line}");
    }
}
