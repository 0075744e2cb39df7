//! Broker destinations against the real servers (`helpers::brokers`):
//! for each kind, N events posted land in the broker with their ids,
//! metadata and exact bodies; a broker SIGKILLed while events keep
//! arriving has every event after its restart and every delivery ends
//! `delivered`; a target the broker refuses is retried with the reason,
//! then dead, never `delivered`; and the URL's password is in no log line.
//! NATS and Redis also keep exactly one copy when the reply to a publish
//! is lost ([`CutProxy`]) and the publish is retried.
//!
//! hookbox is the real binary ([`ChildServer`]) with `RUST_LOG=debug`, the
//! broker clients' own debug lines included, so the password checks read
//! every line any of them wrote.

mod amqp;
mod mqtt;
mod nats;
mod redis;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tempfile::TempDir;

use crate::helpers::*;

/// A GitHub source named `github` with one destination (the broker table
/// `destination`), short timeouts and quick retries, no breaker (an
/// outage must not pause it past the test's patience).
pub fn broker_source(destination: &str, max_attempts: u32) -> String {
    format!(
        r#"
[[sources]]
name = "github"
kind = "github"
secrets = ["{GITHUB_SECRET}"]
order_key = ["/repository/full_name"]
[sources.deliver]
{destination}
timeout = "2s"
max_attempts = {max_attempts}
backoff_base = "100ms"
backoff_cap = "500ms"
breaker_failures = 0
"#
    )
}

/// hookbox serving `sources`, with debug logs, and its database.
pub struct Hookbox {
    pub server: ChildServer,
    pub db: PathBuf,
    _dir: TempDir,
}

impl Hookbox {
    pub async fn start(sources: &str) -> Hookbox {
        Self::start_with_env(sources, &[]).await
    }

    /// [`Hookbox::start`] with `env` set for the process (`SSL_CERT_FILE`:
    /// the roots it trusts, as the system's would be).
    pub async fn start_with_env(sources: &str, env: &[(&str, &str)]) -> Hookbox {
        let dir = tempfile::tempdir().unwrap();
        let mut env = env.to_vec();
        env.push(("RUST_LOG", "debug"));
        let db = dir.path().join("hookbox.db");
        let server =
            ChildServer::spawn_ready_with(dir.path(), &db, sources, "", 0, &env, |_| {}).await;
        Hookbox {
            server,
            db,
            _dir: dir,
        }
    }

    /// Posts event `n` (a GitHub `push` with delivery id `{tag}-{n}`) and
    /// returns its delivery id and body.
    pub async fn post(&self, tag: &str, n: usize) -> (String, Vec<u8>) {
        let delivery = format!("{tag}-{n}");
        let body = format!(
            r#"{{"repository":{{"full_name":"acme/r{}"}},"n":{n},"tag":"{tag}","pad":"{}"}}"#,
            // 32 order keys: up to 32 publishes in flight at the broker
            // kinds' default concurrency, on the destination's one
            // connection.
            n % 32,
            // JSON escapes and non-ASCII text: bytes a broker must keep.
            "é\\\"\\\\".repeat(n % 3)
        )
        .into_bytes();
        let client = reqwest::Client::new();
        let response = github_request(&client, &self.server.url("/hooks/github"), &delivery, &body)
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "posting {delivery}: {}",
            response.status()
        );
        (delivery, body)
    }

    /// Posts events `0..n`.
    pub async fn post_many(&self, tag: &str, n: usize) -> BTreeMap<String, Vec<u8>> {
        let mut sent = BTreeMap::new();
        for i in 0..n {
            let (id, body) = self.post(tag, i).await;
            sent.insert(id, body);
        }
        sent
    }

    /// How many deliveries are in each state.
    pub fn states(&self) -> BTreeMap<String, i64> {
        states(&self.db)
    }

    /// Waits until `n` deliveries are `state`, for at most `within`.
    pub async fn wait_for(&self, state: &str, n: i64, within: Duration) {
        let deadline = std::time::Instant::now() + within;
        loop {
            let states = self.states();
            if states.get(state).copied().unwrap_or(0) >= n {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "waited {within:?} for {n} {state} deliveries; have {states:?}\n{}",
                self.server.log_tail(40)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The errors of every attempt, oldest first.
    pub fn attempt_errors(&self) -> Vec<String> {
        open(&self.db)
            .prepare("SELECT coalesce(error, '') FROM attempts ORDER BY id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    /// Asserts that nothing hookbox wrote holds `password`: not its log,
    /// not the attempts' errors.
    pub fn assert_never_shows(&self, password: &str) {
        let output = self.server.output();
        assert!(!output.is_empty());
        assert!(
            !output.contains(password),
            "the broker password is in hookbox's log:\n{output}"
        );
        for error in self.attempt_errors() {
            assert!(
                !error.contains(password),
                "the password is in an attempt's error: {error}"
            );
        }
    }
}

pub fn states(db: &Path) -> BTreeMap<String, i64> {
    open(db)
        .prepare("SELECT state, count(*) FROM deliveries GROUP BY state")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// A message as the broker holds it: its headers or properties (the
/// metadata) and its body.
#[derive(Debug, Clone)]
pub struct Held {
    pub meta: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

/// Checks that `held` is exactly `sent`: one message per event, each with
/// its delivery id and metadata, the body byte for byte.
pub fn assert_exactly(sent: &BTreeMap<String, Vec<u8>>, held: &[Held]) {
    let mut by_id: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for message in held {
        let id = message
            .meta
            .get("hookbox-delivery-id")
            .unwrap_or_else(|| panic!("no hookbox-delivery-id in {:?}", message.meta))
            .clone();
        assert_eq!(
            message.meta.get("hookbox-source").map(String::as_str),
            Some("github")
        );
        assert_eq!(
            message.meta.get("hookbox-event-type").map(String::as_str),
            Some("push")
        );
        assert!(
            message
                .meta
                .get("hookbox-event-id")
                .is_some_and(|v| v.parse::<i64>().is_ok()),
            "{:?}",
            message.meta
        );
        assert!(
            message
                .meta
                .get("hookbox-received-at")
                .is_some_and(|v| v.ends_with('Z')),
            "{:?}",
            message.meta
        );
        assert!(
            by_id.insert(id.clone(), message.body.clone()).is_none(),
            "{id} twice"
        );
    }
    let missing: Vec<&String> = sent.keys().filter(|id| !by_id.contains_key(*id)).collect();
    assert!(missing.is_empty(), "missing from the broker: {missing:?}");
    assert_eq!(held.len(), sent.len(), "one message per event");
    assert_eq!(&by_id, sent, "the bodies, byte for byte, by delivery id");
}

/// Every distinct event of `held`, by body: `sent` all there, nothing else.
pub fn assert_at_least_once(sent: &BTreeMap<String, Vec<u8>>, held: &[Held]) {
    let bodies: std::collections::BTreeSet<&Vec<u8>> = held.iter().map(|m| &m.body).collect();
    let wanted: std::collections::BTreeSet<&Vec<u8>> = sent.values().collect();
    assert_eq!(bodies, wanted, "every event at least once, nothing else");
}

/// Posts events while `outage` runs (the broker killed, down a while,
/// restarted), then waits until every delivery is `delivered`. Returns
/// what was posted.
pub async fn post_through(
    hookbox: &Hookbox,
    tag: &str,
    n: usize,
    outage: impl Future<Output = ()>,
) -> BTreeMap<String, Vec<u8>> {
    let posting = async {
        let mut sent = BTreeMap::new();
        for i in 0..n {
            let (id, body) = hookbox.post(tag, i).await;
            sent.insert(id, body);
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        sent
    };
    let (sent, ()) = tokio::join!(posting, outage);
    hookbox
        .wait_for("delivered", n as i64, Duration::from_secs(60))
        .await;
    assert_eq!(hookbox.states().len(), 1, "{:?}", hookbox.states());
    sent
}

/// A broker URL with TLS: refused while hookbox trusts only the system's
/// roots (the test CA is not among them), delivered once `SSL_CERT_FILE`
/// adds the CA; returns what was sent for the caller to find in the broker.
pub async fn tls_is_verified_then_delivers(
    broker: &Broker,
    destination: &str,
    refused: &str,
) -> BTreeMap<String, Vec<u8>> {
    let hookbox = Hookbox::start(&broker_source(destination, 2)).await;
    hookbox.post("untrusted", 0).await;
    hookbox.wait_for("dead", 1, Duration::from_secs(20)).await;
    let errors = hookbox.attempt_errors();
    assert!(errors.iter().all(|e| e.contains(refused)), "{errors:?}");
    drop(hookbox);
    let ca = broker.ca_file().display().to_string();
    let hookbox =
        Hookbox::start_with_env(&broker_source(destination, 5), &[("SSL_CERT_FILE", &ca)]).await;
    let sent = hookbox.post_many("tls", 5).await;
    hookbox
        .wait_for("delivered", 5, Duration::from_secs(20))
        .await;
    hookbox.assert_never_shows(&broker.password);
    sent
}

/// The outage [`post_through`] runs: after `before`, SIGKILL; `down`
/// later, the same server again.
pub async fn outage(broker: &mut Broker, before: Duration, down: Duration) {
    tokio::time::sleep(before).await;
    broker.kill9();
    tokio::time::sleep(down).await;
    broker.restart().await;
}

/// The dashboard's overview and `/api/stats` name each destination's kind
/// and where it goes, never the credentials in its URL. No broker is
/// needed: the attempts fail, the config is what is shown.
#[tokio::test]
async fn the_dashboard_and_stats_show_kind_and_target_without_credentials() {
    const PASSWORD: &str = "hunter2-broker-password";
    let sources = format!(
        r#"{GITHUB_SOURCE}
[[sources.deliver]]
name = "bus"
nats = {{ url = "nats://app:{PASSWORD}@127.0.0.1:1", subject = "hooks.{{source}}" }}
backoff_base = "1h"
backoff_cap = "1h"
[[sources.deliver]]
name = "stream"
redis = {{ url = "redis://default:{PASSWORD}@127.0.0.1:1/0", stream = "hooks:{{source}}" }}
backoff_base = "1h"
backoff_cap = "1h"
[[sources.deliver]]
name = "queue"
amqp = {{ url = "amqp://app:{PASSWORD}@127.0.0.1:1/%2f", exchange = "hooks", routing_key = "{{event_type}}" }}
backoff_base = "1h"
backoff_cap = "1h"
[[sources.deliver]]
name = "home"
mqtt = {{ url = "mqtt://app:{PASSWORD}@127.0.0.1:1", topic = "hooks/{{source}}", qos = 2 }}
backoff_base = "1h"
backoff_cap = "1h"
"#
    );
    let app = TestApp::spawn(&sources).await;
    assert!(
        app.post_github("shown-1", b"{}")
            .await
            .status()
            .is_success()
    );
    let stats = json(app.admin_get("/api/stats").await).await;
    let text = stats.to_string();
    assert!(!text.contains(PASSWORD), "{text}");
    let destinations = &stats["sources"][0]["destinations"];
    for (name, kind, target) in [
        ("bus", "nats", "nats://127.0.0.1:1 subject hooks.{source}"),
        (
            "stream",
            "redis",
            "redis://127.0.0.1:1 stream hooks:{source}",
        ),
        (
            "queue",
            "amqp",
            "amqp://127.0.0.1:1 exchange \"hooks\" routing key {event_type}",
        ),
        ("home", "mqtt", "mqtt://127.0.0.1:1 topic hooks/{source}"),
    ] {
        assert_eq!(destinations[name]["kind"], kind, "{text}");
        assert_eq!(destinations[name]["target"], target, "{text}");
    }
    let login = crate::dashboard::login(&app).await;
    let page = crate::dashboard::get(&app, "/", &login.cookie).await;
    assert!(!page.contains(PASSWORD), "{page}");
    assert!(
        page.contains("nats: nats://127.0.0.1:1 subject hooks.{source}"),
        "{page}"
    );
    assert!(
        page.contains("mqtt: mqtt://127.0.0.1:1 topic hooks/{source}"),
        "{page}"
    );
    // The failed attempts say why, without the password.
    let errors: Vec<String> = app
        .db()
        .prepare("SELECT coalesce(error, '') FROM attempts")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for error in &errors {
        assert!(!error.contains(PASSWORD), "{error}");
    }
    app.shutdown().await;
}
