//! Routes through the real binary (`hookbox serve` as a child process): a
//! source's events fanned out to several destinations, each taking what
//! its filter matches, each a lane of its own (retries, per-key order,
//! dead letters), and replay per destination, by the admin API and the
//! CLI. Url destinations are `Downstream`s (helpers/servers.rs) that record what
//! they get; command destinations are a [`Recorder`] script.
//! `routes_crash.rs` has kill -9 with deliveries to several destinations
//! in flight.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant, UNIX_EPOCH};

use tempfile::TempDir;

use crate::helpers::*;

/// The signing secret of a second url destination: each signs with its own.
pub const OTHER_SIGNING_SECRET: &str = "whsec_cm91dGVzLXNlY29uZC1kZXN0aW5hdGlvbi1rZXkhISE=";

/// Retries that fit in a test's patience.
pub const QUICK_RETRIES: &str = "backoff_base = \"50ms\"\nbackoff_cap = \"400ms\"";

/// The longest a delivery to a healthy destination may take after the
/// 202, however busy the others are: generous, for a loaded 2-core machine.
const PROMPT: Duration = Duration::from_secs(2);

// -------------------------------------------------------------- config ---

/// The `github` source keyed on the repository, with `destinations`
/// (each made by [`destination`]).
pub fn routed_source(destinations: &[String]) -> String {
    format!(
        "[[sources]]\nname = \"github\"\nkind = \"github\"\nsecrets = [\"{GITHUB_SECRET}\"]\n\
         order_key = [\"/repository/full_name\"]\n{}",
        destinations.concat()
    )
}

/// A `[[sources.deliver]]` table named `name` with `lines` (where it goes,
/// its filter, its settings).
pub fn destination(name: &str, lines: &[&str]) -> String {
    format!(
        "[[sources.deliver]]\nname = \"{name}\"\n{}\n",
        lines.join("\n")
    )
}

/// The lines of a url destination that signs with `secret`.
pub fn signed_url(url: &str, secret: &str) -> String {
    format!("url = \"{url}\"\nsigning_secret = \"{secret}\"")
}

// ------------------------------------------------------------- traffic ---

/// POSTs a signed GitHub delivery of type `event` and returns the row id
/// of the 202.
pub async fn post_github_event(addr: SocketAddr, event: &str, delivery: &str, body: &[u8]) -> i64 {
    let url = format!("http://{addr}/hooks/github");
    let r = github_event_request(&reqwest::Client::new(), &url, event, delivery, body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "posting {delivery}");
    json(r).await["id"].as_i64().unwrap()
}

/// A GitHub-like body on `repo`, with `git_ref` when given.
pub fn github_body(repo: &str, git_ref: Option<&str>) -> Vec<u8> {
    let mut body = serde_json::json!({"repository": {"full_name": repo}});
    if let Some(git_ref) = git_ref {
        body["ref"] = git_ref.into();
    }
    body.to_string().into_bytes()
}

// ------------------------------------------------------------ database ---

/// One delivery as the `deliveries` table holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRow {
    pub event_id: i64,
    pub delivery_id: String,
    pub destination: String,
    pub state: String,
    pub attempts: i64,
    pub delivered_at: Option<i64>,
}

/// The deliveries `filter` (an SQL condition on `d` and `e`) picks, by
/// event then destination.
fn delivery_rows(db: &Path, filter: &str) -> Vec<DeliveryRow> {
    open(db)
        .prepare(&format!(
            "SELECT d.event_id, e.delivery_id, d.destination, d.state, d.attempts, d.delivered_at
             FROM deliveries AS d JOIN events AS e ON e.id = d.event_id
             WHERE {filter} ORDER BY d.event_id, d.destination"
        ))
        .unwrap()
        .query_map([], |r| {
            Ok(DeliveryRow {
                event_id: r.get(0)?,
                delivery_id: r.get(1)?,
                destination: r.get(2)?,
                state: r.get(3)?,
                attempts: r.get(4)?,
                delivered_at: r.get(5)?,
            })
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Every delivery in the database.
pub fn all_deliveries(db: &Path) -> Vec<DeliveryRow> {
    delivery_rows(db, "1")
}

/// Event `id`'s deliveries, by destination name.
pub fn deliveries_of(db: &Path, id: i64) -> Vec<DeliveryRow> {
    delivery_rows(db, &format!("d.event_id = {id}"))
}

/// Event `id`'s delivery to `destination`.
pub fn delivery_of(db: &Path, id: i64, destination: &str) -> Option<DeliveryRow> {
    deliveries_of(db, id)
        .into_iter()
        .find(|d| d.destination == destination)
}

/// The delivery ids of the events `destination` has a delivery for, sorted.
pub fn routed_to(db: &Path, destination: &str) -> Vec<String> {
    let mut ids: Vec<String> = all_deliveries(db)
        .into_iter()
        .filter(|d| d.destination == destination)
        .map(|d| d.delivery_id)
        .collect();
    ids.sort();
    ids
}

/// The event's own (derived) state.
pub fn event_state(db: &Path, id: i64) -> String {
    open(db)
        .query_row(
            &format!("SELECT {STATE} FROM events WHERE id = ?1"),
            [id],
            |r| r.get(0),
        )
        .unwrap()
}

fn received_at(db: &Path, id: i64) -> i64 {
    open(db)
        .query_row("SELECT received_at FROM events WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .unwrap()
}

/// Waits until event `id`'s delivery to `destination` is `state`.
pub async fn wait_for_delivery(db: &Path, id: i64, destination: &str, state: &str) -> DeliveryRow {
    eventually(&format!("event {id} {state} at {destination}"), || {
        delivery_of(db, id, destination).filter(|d| d.state == state)
    })
    .await
}

/// Waits, up to `patience`, until no delivery is pending; every
/// delivery then stays as it is until something replays it.
pub async fn wait_until_settled(db: &Path, patience: Duration) {
    let deadline = Instant::now() + patience;
    loop {
        let pending: Vec<DeliveryRow> = all_deliveries(db)
            .into_iter()
            .filter(|d| d.state == "pending")
            .collect();
        if pending.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "still pending after {patience:?}: {pending:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The delivery ids of `hits`, sorted (each as often as it came).
pub fn delivered_ids(hits: &[Hit]) -> Vec<String> {
    let mut ids: Vec<String> = hits.iter().map(|h| h.delivery().to_owned()).collect();
    ids.sort();
    ids
}

// ------------------------------------------------------------ commands ---

/// Records one run in a directory of its own under `$1`: its arguments
/// after the first two, one a line; its `HOOKBOX_*` environment; its
/// stdin; the process that started it. Sleeps `$2` seconds, then renames
/// the directory into place, so a run is seen whole or not at all
/// (`.run-*` while it runs).
const RECORD_RUN: &str = r#"
out="$1"; delay="$2"; shift 2
run="$out/.run-$$"
mkdir "$run"
echo "$PPID" > "$run/parent"
printf '%s\n' "$@" > "$run/args"
env | grep '^HOOKBOX_' | sort > "$run/env"
cat > "$run/stdin"
sleep "$delay"
mv "$run" "$out/run-$HOOKBOX_DELIVERY_ID-$HOOKBOX_ATTEMPT-$$"
"#;

/// A command destination that records every run ([`RECORD_RUN`]).
pub struct Recorder {
    dir: TempDir,
}

/// One finished run of a [`Recorder`] command.
#[derive(Debug)]
pub struct Run {
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub stdin: Vec<u8>,
    /// The pid of the hookbox that ran it.
    pub parent: u32,
}

impl Run {
    pub fn delivery(&self) -> &str {
        &self.env["HOOKBOX_DELIVERY_ID"]
    }
}

impl Recorder {
    pub fn create() -> Recorder {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("record.sh"), RECORD_RUN).unwrap();
        std::fs::create_dir(dir.path().join("runs")).unwrap();
        Recorder { dir }
    }

    /// The `command` line of the destination: each run takes `delay`
    /// (`sleep`'s syntax) and gets `args` (placeholders and all).
    pub fn command(&self, delay: &str, args: &[&str]) -> String {
        let path = |name: &str| self.dir.path().join(name).display().to_string();
        let mut argv = vec![
            "/bin/sh".to_owned(),
            path("record.sh"),
            path("runs"),
            delay.to_owned(),
        ];
        argv.extend(args.iter().map(|a| a.to_string()));
        // A JSON array of strings is a TOML array of strings.
        format!("command = {}", serde_json::to_string(&argv).unwrap())
    }

    fn entries(&self) -> Vec<std::path::PathBuf> {
        std::fs::read_dir(self.dir.path().join("runs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    }

    /// The finished runs.
    pub fn runs(&self) -> Vec<Run> {
        self.entries()
            .into_iter()
            .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
            .map(|p| {
                let read = |name: &str| std::fs::read(p.join(name)).unwrap();
                let text = |name: &str| String::from_utf8(read(name)).unwrap();
                Run {
                    args: text("args").lines().map(str::to_owned).collect(),
                    env: text("env")
                        .lines()
                        .filter_map(|l| l.split_once('='))
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        .collect(),
                    stdin: read("stdin"),
                    parent: text("parent").trim().parse().unwrap(),
                }
            })
            .collect()
    }

    /// The delivery ids of the finished runs, sorted (each as often as it ran).
    pub fn delivered_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .runs()
            .iter()
            .map(|r| r.delivery().to_owned())
            .collect();
        ids.sort();
        ids
    }
}

/// hookbox on a fresh database in `dir` with `sources`.
async fn serve(dir: &TempDir, sources: &str, run: usize) -> ChildServer {
    let db = dir.path().join("hookbox.db");
    ChildServer::spawn_ready(dir.path(), &db, sources, "", run).await
}

/// Stops `server` with SIGTERM and checks it exited 0.
pub async fn stop(mut server: ChildServer) {
    let status = server.terminate(Duration::from_secs(15)).await;
    assert!(status.success(), "{status:?}");
}

// ------------------------------------------------------------- fan-out ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_of_three_destinations_receives_exactly_the_events_its_filter_takes() {
    let ci = Downstream::start(|_, _| Reply::status(204)).await;
    let notify = Downstream::start(|_, _| Reply::status(204)).await;
    let deploy = Recorder::create();
    let sources = routed_source(&[
        destination(
            "ci",
            &[
                &url_destination(&ci.url()),
                r#"events = ["push", "pull_*"]"#,
                QUICK_RETRIES,
            ],
        ),
        destination(
            "deploy",
            &[
                &deploy.command(
                    "0",
                    &["{event_type}", "{/ref}", "{delivery_id}", "{source}"],
                ),
                r#"events = ["push"]"#,
                r#"when = { "/ref" = "refs/heads/main" }"#,
                QUICK_RETRIES,
            ],
        ),
        destination(
            "notify",
            &[
                &signed_url(&notify.url(), OTHER_SIGNING_SECRET),
                r#"events = ["push", "issues"]"#,
                r#"when = { "/repository/full_name" = ["acme/shop", "acme/web"] }"#,
                QUICK_RETRIES,
            ],
        ),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let server = serve(&dir, &sources, 0).await;

    // (delivery, event type, body, the destinations whose filter takes it)
    let main_shop = r#"{"ref":"refs/heads/main","repository":{"full_name":"acme/shop"}}"#;
    let dev_shop = r#"{"ref":"refs/heads/dev","repository":{"full_name":"acme/shop"}}"#;
    let main_lib = r#"{"ref":"refs/heads/main","repository":{"full_name":"other/lib"}}"#;
    let pr_web =
        r#"{"action":"opened","ref":"refs/heads/main","repository":{"full_name":"acme/web"}}"#;
    let issue_web = r#"{"action":"opened","repository":{"full_name":"acme/web"}}"#;
    let issue_lib = r#"{"action":"opened","repository":{"full_name":"other/lib"}}"#;
    let events: [(&str, &str, &str, &[&str]); 8] = [
        (
            "push-main-shop",
            "push",
            main_shop,
            &["ci", "deploy", "notify"],
        ),
        ("push-dev-shop", "push", dev_shop, &["ci", "notify"]),
        ("push-main-lib", "push", main_lib, &["ci", "deploy"]),
        ("pr-web", "pull_request", pr_web, &["ci"]),
        ("issue-web", "issues", issue_web, &["notify"]),
        ("issue-lib", "issues", issue_lib, &[]),
        ("star-shop", "watch", main_shop, &[]),
        // Not JSON: only a filter without pointers takes it.
        ("push-form", "push", "ref=refs/heads/main", &["ci"]),
    ];
    let mut ids = BTreeMap::new();
    for (delivery, event, body, _) in &events {
        let id = post_github_event(server.addr, event, delivery, body.as_bytes()).await;
        ids.insert(*delivery, id);
    }
    // Routed at ingest: the 202 covered one delivery per destination
    // that takes the event, and none for the others.
    for (delivery, _, _, takes) in &events {
        let routed: Vec<String> = deliveries_of(&db, ids[delivery])
            .into_iter()
            .map(|d| d.destination)
            .collect();
        assert_eq!(routed, *takes, "{delivery}");
    }

    wait_until_settled(&db, PATIENCE).await;
    for (delivery, _, _, takes) in &events {
        let state = if takes.is_empty() {
            "stored"
        } else {
            "delivered"
        };
        assert_eq!(event_state(&db, ids[delivery]), state, "{delivery}");
    }
    let expected = |name: &str| -> Vec<String> {
        let mut ids: Vec<String> = events
            .iter()
            .filter(|e| e.3.contains(&name))
            .map(|e| e.0.to_owned())
            .collect();
        ids.sort();
        ids
    };
    let sent = |delivery: &str| *events.iter().find(|e| e.0 == delivery).unwrap();
    for (name, down, secret, other) in [
        ("ci", &ci, SIGNING_SECRET, OTHER_SIGNING_SECRET),
        ("notify", &notify, OTHER_SIGNING_SECRET, SIGNING_SECRET),
    ] {
        let hits = down.hits();
        assert_eq!(delivered_ids(&hits), expected(name), "what {name} received");
        for hit in &hits {
            let (delivery, event, body, _) = sent(hit.delivery());
            assert_eq!(&hit.body[..], body.as_bytes(), "{name}: {delivery}");
            assert_eq!(hit.header("x-github-event"), event, "{name}: {delivery}");
            assert_eq!(hit.header("x-github-delivery"), delivery, "{name}");
            assert_eq!(
                verify_signature_with(secret, hit),
                Ok(()),
                "{name}: {delivery}"
            );
            assert!(
                verify_signature_with(other, hit).is_err(),
                "{name} signs with its own secret"
            );
        }
    }
    let runs = deploy.runs();
    assert_eq!(
        deploy.delivered_ids(),
        expected("deploy"),
        "what deploy ran"
    );
    for run in &runs {
        let (delivery, event, body, _) = sent(run.delivery());
        assert_eq!(run.args, [event, "refs/heads/main", delivery, "github"]);
        assert_eq!(run.env["HOOKBOX_DESTINATION"], "deploy", "{run:?}");
        assert_eq!(run.env["HOOKBOX_SOURCE"], "github", "{run:?}");
        assert_eq!(run.env["HOOKBOX_EVENT_TYPE"], event, "{run:?}");
        assert_eq!(run.env["HOOKBOX_EVENT_ID"], ids[delivery].to_string());
        assert_eq!(run.stdin, body.as_bytes(), "{delivery}");
    }
    stop(server).await;
}

// ----------------------------------------------------------- isolation ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_that_is_down_never_slows_another_and_gets_every_event_when_back() {
    const EVENTS: usize = 8;
    let flaky = Downstream::start(|_, _| Reply::status(503)).await;
    let steady = Downstream::start(|_, _| Reply::status(204)).await;
    let sources = routed_source(&[
        destination(
            "flaky",
            &[
                // Its own retries keep failing all along; the breaker
                // (tests/it/protect.rs) would pause it after ten.
                &url_destination_unguarded(&flaky.url()),
                "max_attempts = 100",
                "backoff_base = \"200ms\"",
                "backoff_cap = \"1s\"",
            ],
        ),
        destination("steady", &[&url_destination(&steady.url()), QUICK_RETRIES]),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let server = serve(&dir, &sources, 0).await;

    let mut sent = Vec::new();
    let mut latencies = Vec::new();
    for n in 0..EVENTS {
        // Each event arrives while the flaky destination keeps failing:
        // after another of its attempts.
        let failed_before = flaky.hits().len();
        let delivery = format!("ev-{n}");
        // Two keys: the flaky lane holds each key's later events behind
        // its retrying head; the steady lane must not.
        let body = repo_body(&format!("acme/{}", n % 2), n);
        let id = post_event(server.addr, "github", &delivery, "application/json", &body).await;
        let accepted = Instant::now();
        let hit = eventually(&format!("{delivery} at the steady destination"), || {
            steady.hits_for(&delivery).into_iter().next()
        })
        .await;
        latencies.push((delivery.clone(), hit.at.saturating_duration_since(accepted)));
        sent.push((delivery, id));
        eventually("another failed attempt at the flaky destination", || {
            (flaky.hits().len() > failed_before).then_some(())
        })
        .await;
    }
    eprintln!("steady destination, 202 to delivery, while the other was down: {latencies:?}");
    assert!(
        flaky.hits().iter().all(|h| !h.ok()),
        "the flaky destination was down throughout"
    );
    for (delivery, latency) in &latencies {
        assert!(
            *latency <= PROMPT,
            "{delivery} reached the steady destination {latency:?} after its 202: {latencies:?}"
        );
    }
    for (delivery, id) in &sent {
        wait_for_delivery(&db, *id, "steady", "delivered").await;
        let flaky_row = delivery_of(&db, *id, "flaky").unwrap();
        assert_eq!(flaky_row.state, "pending", "{delivery}: {flaky_row:?}");
    }
    let first = delivery_of(&db, sent[0].1, "flaky").unwrap();
    assert!(first.attempts >= 2, "retried while down: {first:?}");

    // Back up: every event reaches it, once, each key in order.
    flaky.set_script(|_, _| Reply::status(204));
    wait_until_settled(&db, PATIENCE).await;
    let successes: Vec<String> = flaky
        .hits()
        .iter()
        .filter(|h| h.ok())
        .map(|h| h.delivery().to_owned())
        .collect();
    let mut all: Vec<String> = sent.iter().map(|(d, _)| d.clone()).collect();
    all.sort();
    let mut got = successes.clone();
    got.sort();
    assert_eq!(got, all, "what the flaky destination got once back");
    for key in 0..2 {
        let of_key: Vec<&String> = successes
            .iter()
            .filter(|d| d[3..].parse::<usize>().unwrap() % 2 == key)
            .collect();
        let mut ordered = of_key.clone();
        ordered.sort_by_key(|d| d[3..].parse::<usize>().unwrap());
        assert_eq!(of_key, ordered, "key acme/{key} in order");
    }
    assert_eq!(
        delivered_ids(&steady.hits()),
        all,
        "the steady one, once each"
    );
    for (delivery, id) in &sent {
        assert_eq!(event_state(&db, *id), "delivered", "{delivery}");
        assert_eq!(delivery_of(&db, *id, "steady").unwrap().attempts, 1);
    }
    stop(server).await;
}

// -------------------------------------------------------- dead letters ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_410_at_one_destination_makes_only_that_delivery_dead() {
    let ci = Downstream::start(|_, _| Reply::status(410)).await;
    // Slower, so the dead delivery settles while this one is in flight.
    let chat = Downstream::start(|_, _| Reply::status(204).after(Duration::from_millis(300))).await;
    let sources = routed_source(&[
        destination(
            "ci",
            &[
                &url_destination(&ci.url()),
                "max_attempts = 5",
                QUICK_RETRIES,
            ],
        ),
        destination("chat", &[&url_destination(&chat.url()), QUICK_RETRIES]),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let server = serve(&dir, &sources, 0).await;
    let body = repo_body("acme/shop", 1);
    let id = post_event(server.addr, "github", "gone", "application/json", &body).await;

    wait_for_delivery(&db, id, "ci", "dead").await;
    wait_for_delivery(&db, id, "chat", "delivered").await;
    let states: Vec<(String, String, i64)> = deliveries_of(&db, id)
        .into_iter()
        .map(|d| (d.destination, d.state, d.attempts))
        .collect();
    assert_eq!(
        states,
        [
            ("chat".into(), "delivered".into(), 1),
            ("ci".into(), "dead".into(), 1)
        ]
    );
    let attempts: Vec<(String, i64, String, Option<i64>)> = open(&db)
        .prepare(
            "SELECT destination, attempt, outcome, status_code FROM attempts
             WHERE event_id = ?1 ORDER BY destination, id",
        )
        .unwrap()
        .query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        attempts,
        [
            ("chat".into(), 1, "delivered".into(), Some(204)),
            ("ci".into(), 1, "dead".into(), Some(410))
        ],
        "each attempt under its destination"
    );
    assert_eq!(ci.hits().len(), 1, "410 is permanent: no retry");
    assert_eq!(delivered_ids(&chat.hits()), ["gone"]);
    assert_eq!(&chat.hits()[0].body[..], &body[..]);
    assert_eq!(
        event_state(&db, id),
        "dead",
        "derived: one delivery is dead"
    );

    // The admin API shows the event dead and each destination's delivery.
    let r = server.admin_get(&format!("/api/events/{id}")).await;
    assert_eq!(r.status(), 200);
    let event = json(r).await;
    assert_eq!(event["state"], "dead", "{event:#}");
    let deliveries = event["deliveries"]
        .as_array()
        .unwrap_or_else(|| panic!("no deliveries array in {event:#}"));
    assert_eq!(deliveries.len(), 2, "{event:#}");
    let shown = |name: &str| {
        let d = deliveries
            .iter()
            .find(|d| d["destination"] == name)
            .unwrap_or_else(|| panic!("no delivery to {name} in {event:#}"));
        (d["state"].clone(), d["attempts"].clone())
    };
    assert_eq!(shown("ci"), ("dead".into(), 1.into()), "{event:#}");
    assert_eq!(shown("chat"), ("delivered".into(), 1.into()), "{event:#}");
    stop(server).await;
}

// ------------------------------------------------------------ ordering ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_destination_keeps_a_key_in_order_and_one_s_retries_never_hold_the_other_back() {
    // The first event of the key fails three times at `ordered`, each
    // 503 asking for a second's pause: its key waits there, and only there.
    let ordered = Downstream::start(|delivery, nth| match (delivery, nth) {
        ("k1", 1..=3) => Reply::status(503).retry_after("1"),
        _ => Reply::status(204),
    })
    .await;
    let prompt = Downstream::start(|_, _| Reply::status(204)).await;
    let sources = routed_source(&[
        destination(
            "ordered",
            &[
                &url_destination(&ordered.url()),
                "backoff_base = \"50ms\"",
                "backoff_cap = \"2s\"",
            ],
        ),
        destination("prompt", &[&url_destination(&prompt.url()), QUICK_RETRIES]),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let server = serve(&dir, &sources, 0).await;
    let keyed = ["k1", "k2", "k3", "k4"];
    let mut accepted = BTreeMap::new();
    for (n, delivery) in keyed.iter().enumerate() {
        let body = repo_body("acme/k", n);
        post_event(server.addr, "github", delivery, "application/json", &body).await;
        accepted.insert(*delivery, Instant::now());
    }

    wait_until_settled(&db, PATIENCE).await;
    let arrivals = |down: &Downstream| -> Vec<(String, u16)> {
        down.hits()
            .iter()
            .map(|h| (h.delivery().to_owned(), h.status.as_u16()))
            .collect()
    };
    let expected = |statuses: &[(&str, u16)]| -> Vec<(String, u16)> {
        statuses.iter().map(|(d, s)| (d.to_string(), *s)).collect()
    };
    // Strictly in order: nothing of the key before the event ahead of it
    // succeeded, and each once.
    assert_eq!(
        arrivals(&ordered),
        expected(&[
            ("k1", 503),
            ("k1", 503),
            ("k1", 503),
            ("k1", 204),
            ("k2", 204),
            ("k3", 204),
            ("k4", 204)
        ])
    );
    assert_eq!(
        arrivals(&prompt),
        expected(&[("k1", 204), ("k2", 204), ("k3", 204), ("k4", 204)])
    );
    let prompt_hits = prompt.hits();
    for hit in &prompt_hits {
        let latency = hit.at.saturating_duration_since(accepted[hit.delivery()]);
        assert!(
            latency <= PROMPT,
            "{} reached the prompt destination {latency:?} after its 202",
            hit.delivery()
        );
    }
    let k1_through = ordered.hits()[3].at;
    assert!(
        prompt_hits[3].at < k1_through,
        "the prompt destination waited for the other's retries"
    );
    stop(server).await;
}

// -------------------------------------------------------------- replay ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_to_one_destination_leaves_the_others_alone_and_reaches_one_the_event_never_matched()
{
    let ci = Downstream::start(|_, _| Reply::status(204)).await;
    let chat = Downstream::start(|_, _| Reply::status(204)).await;
    let sources = routed_source(&[
        destination(
            "ci",
            &[
                &url_destination(&ci.url()),
                r#"events = ["push"]"#,
                QUICK_RETRIES,
            ],
        ),
        destination(
            "chat",
            &[
                &url_destination(&chat.url()),
                r#"when = { "/ref" = "refs/heads/main" }"#,
                QUICK_RETRIES,
            ],
        ),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let server = serve(&dir, &sources, 0).await;
    let both_body = github_body("acme/shop", Some("refs/heads/main"));
    let both = post_github_event(server.addr, "push", "both", &both_body).await;
    let dev_body = github_body("acme/shop", Some("refs/heads/dev"));
    let ci_only = post_github_event(server.addr, "push", "ci-only", &dev_body).await;
    wait_until_settled(&db, PATIENCE).await;
    assert_eq!(delivered_ids(&ci.hits()), ["both", "ci-only"]);
    assert_eq!(delivered_ids(&chat.hits()), ["both"]);
    assert_eq!(delivery_of(&db, ci_only, "chat"), None, "chat's filter");
    let chat_before = delivery_of(&db, both, "chat").unwrap();
    let ci_before = delivery_of(&db, both, "ci").unwrap();

    // One destination's delivery: the other gets nothing new.
    let r = server
        .admin_post(
            &format!("/api/events/{both}/replay"),
            serde_json::json!({"destination": "ci"}),
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    eventually("both at ci again", || {
        (ci.hits_for("both").len() == 2).then_some(())
    })
    .await;
    eventually("ci's delivery of both settled again", || {
        delivery_of(&db, both, "ci")
            .filter(|d| d.state == "delivered" && d.delivered_at > ci_before.delivered_at)
    })
    .await;
    assert_eq!(&ci.hits_for("both")[1].body[..], &both_body[..]);
    assert_eq!(
        delivery_of(&db, both, "chat").unwrap(),
        chat_before,
        "chat's delivery was not replayed"
    );
    assert_eq!(delivered_ids(&chat.hits()), ["both"]);

    // A destination the event never matched: the delivery is created.
    let r = server
        .admin_post(
            &format!("/api/events/{ci_only}/replay"),
            serde_json::json!({"destination": "chat"}),
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let created = wait_for_delivery(&db, ci_only, "chat", "delivered").await;
    assert_eq!(created.attempts, 1);
    let hits = chat.hits_for("ci-only");
    assert_eq!(hits.len(), 1);
    assert_eq!(&hits[0].body[..], &dev_body[..]);
    assert_eq!(verify_signature_with(SIGNING_SECRET, &hits[0]), Ok(()));
    wait_until_settled(&db, PATIENCE).await;
    assert_eq!(
        delivered_ids(&ci.hits()),
        ["both", "both", "ci-only"],
        "ci got nothing new"
    );
    assert_eq!(delivered_ids(&chat.hits()), ["both", "ci-only"]);
    stop(server).await;
}

/// Waits until hookbox's clock is past `ms`, so that what it receives
/// next is received later than that.
async fn after_millisecond(ms: i64) {
    while hookbox::support::clock::now_ms() <= ms {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_added_to_the_config_gets_the_old_events_its_filter_takes_by_api_and_by_cli()
{
    let ci = Downstream::start(|_, _| Reply::status(204)).await;
    let chat = Downstream::start(|_, _| Reply::status(204)).await;
    let audit = Downstream::start(|_, _| Reply::status(204)).await;
    let archive = Recorder::create();
    let ci_destination = destination(
        "ci",
        &[
            &url_destination(&ci.url()),
            r#"events = ["push"]"#,
            QUICK_RETRIES,
        ],
    );
    let chat_destination = destination(
        "chat",
        &[
            &url_destination(&chat.url()),
            r#"when = { "/ref" = "refs/heads/main" }"#,
            QUICK_RETRIES,
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let first = [ci_destination.clone(), chat_destination.clone()];
    let server = serve(&dir, &routed_source(&first), 0).await;
    // (delivery, event type, ref), received in this order, each in a
    // millisecond of its own.
    let events = [
        ("early-issue", "issues", None),
        ("early-push", "push", Some("refs/heads/dev")),
        ("push-main", "push", Some("refs/heads/main")),
        ("push-dev", "push", Some("refs/heads/dev")),
        ("issue", "issues", None),
        ("issue-main", "issues", Some("refs/heads/main")),
        ("late-push", "push", Some("refs/heads/dev")),
    ];
    let mut ids = BTreeMap::new();
    let mut last = None;
    for (delivery, event, git_ref) in events {
        if let Some(last) = last {
            after_millisecond(received_at(&db, last)).await;
        }
        let body = github_body("acme/shop", git_ref);
        let id = post_github_event(server.addr, event, delivery, &body).await;
        ids.insert(delivery, id);
        last = Some(id);
    }
    wait_until_settled(&db, PATIENCE).await;
    let ci_got = ["early-push", "late-push", "push-dev", "push-main"];
    assert_eq!(delivered_ids(&ci.hits()), ci_got);
    assert_eq!(delivered_ids(&chat.hits()), ["issue-main", "push-main"]);
    assert_eq!(event_state(&db, ids["issue"]), "stored");
    let before = all_deliveries(&db);
    stop(server).await;

    // A destination added to the config gets nothing by itself; a replay
    // naming it gives it what its filter takes since the time given.
    let audit_destination = destination(
        "audit",
        &[
            &url_destination(&audit.url()),
            r#"events = ["issues"]"#,
            QUICK_RETRIES,
        ],
    );
    let second = [
        ci_destination.clone(),
        chat_destination.clone(),
        audit_destination.clone(),
    ];
    let server = serve(&dir, &routed_source(&second), 1).await;
    assert_eq!(all_deliveries(&db), before, "nothing routed by the restart");
    let since = received_at(&db, ids["push-main"]);
    let r = server
        .admin_post(
            "/api/replay",
            serde_json::json!({"source": "github", "destination": "audit", "since": since}),
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(routed_to(&db, "audit"), ["issue", "issue-main"]);
    wait_until_settled(&db, PATIENCE).await;
    assert_eq!(delivered_ids(&audit.hits()), ["issue", "issue-main"]);
    assert_eq!(event_state(&db, ids["issue"]), "delivered");
    let others: Vec<DeliveryRow> = all_deliveries(&db)
        .into_iter()
        .filter(|d| d.destination != "audit")
        .collect();
    assert_eq!(
        others, before,
        "the other destinations' deliveries untouched"
    );
    let before = all_deliveries(&db);
    stop(server).await;

    // The CLI, while the server is stopped; the next start delivers.
    let archive_destination = destination(
        "archive",
        &[
            &archive.command("0", &["{delivery_id}"]),
            r#"events = ["push"]"#,
            QUICK_RETRIES,
        ],
    );
    let third = routed_source(&[
        ci_destination,
        chat_destination,
        audit_destination,
        archive_destination,
    ]);
    let config = dir.path().join("replay.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ndatabase = {:?}\n{third}",
            db.display().to_string()
        ),
    )
    .unwrap();
    let since_ms = received_at(&db, ids["push-dev"]);
    let since = UNIX_EPOCH + Duration::from_millis(since_ms as u64);
    let since = humantime::format_rfc3339_millis(since).to_string();
    let out = crate::helpers::hookbox()
        .arg("replay")
        .arg("--config")
        .arg(&config)
        .args(["--source", "github", "--destination", "archive"])
        .args(["--since", &since])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "hookbox replay --since {since}: {:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(routed_to(&db, "archive"), ["late-push", "push-dev"]);
    let server = serve(&dir, &third, 2).await;
    wait_until_settled(&db, PATIENCE).await;
    assert_eq!(archive.delivered_ids(), ["late-push", "push-dev"]);
    for run in archive.runs() {
        assert_eq!(run.env["HOOKBOX_DESTINATION"], "archive", "{run:?}");
        assert_eq!(run.args, [run.delivery()]);
    }
    let others: Vec<DeliveryRow> = all_deliveries(&db)
        .into_iter()
        .filter(|d| d.destination != "archive")
        .collect();
    assert_eq!(
        others, before,
        "the other destinations' deliveries untouched"
    );
    assert_eq!(delivered_ids(&ci.hits()), ci_got);
    assert_eq!(delivered_ids(&chat.hits()), ["issue-main", "push-main"]);
    assert_eq!(delivered_ids(&audit.hits()), ["issue", "issue-main"]);
    stop(server).await;
}
