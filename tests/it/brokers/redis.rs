//! `redis`: Redis Streams on a real `redis-server` (append-only file,
//! fsync always), with a password.

use std::collections::BTreeMap;
use std::time::Duration;

use ::redis::aio::MultiplexedConnection;
use ::redis::streams::StreamRangeReply;

use super::*;

async fn connect(broker: &Broker) -> MultiplexedConnection {
    ::redis::Client::open(broker.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Every entry of `stream`, oldest first.
async fn held(broker: &Broker, stream: &str) -> Vec<Held> {
    let reply: StreamRangeReply = ::redis::cmd("XRANGE")
        .arg(stream)
        .arg("-")
        .arg("+")
        .query_async(&mut connect(broker).await)
        .await
        .unwrap();
    reply
        .ids
        .into_iter()
        .map(|entry| {
            let mut meta = BTreeMap::new();
            let mut body = Vec::new();
            for (field, value) in entry.map {
                let bytes: Vec<u8> = ::redis::from_redis_value(value).unwrap();
                if field == "body" {
                    body = bytes;
                } else {
                    meta.insert(field, String::from_utf8(bytes).unwrap());
                }
            }
            Held { meta, body }
        })
        .collect()
}

fn destination(url: &str, extra: &str) -> String {
    format!(r#"redis = {{ url = "{url}", stream = "hooks:{{source}}:{{destination}}"{extra} }}"#)
}

const STREAM: &str = "hooks:github:default";

#[tokio::test(flavor = "multi_thread")]
async fn every_event_is_one_entry_with_its_metadata_and_exact_body() {
    let Some(broker) = Broker::start(BrokerKind::Redis).await else {
        return;
    };
    let hookbox = Hookbox::start(&broker_source(&destination(&broker.url(), ""), 5)).await;
    let sent = hookbox.post_many("redis", 30).await;
    hookbox
        .wait_for("delivered", 30, Duration::from_secs(20))
        .await;
    let held = held(&broker, STREAM).await;
    for entry in &held {
        assert_eq!(entry.meta["content-type"], "application/json");
    }
    assert_exactly(&sent, &held);
    hookbox.assert_never_shows(&broker.password);
}

/// `calls` of `EVALSHA` so far, from `INFO commandstats`.
async fn evalsha_calls(broker: &Broker) -> u64 {
    let info: String = ::redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut connect(broker).await)
        .await
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

/// Pauses or resumes (`action`) the destination through the admin API.
async fn by_hand(hookbox: &Hookbox, action: &str) {
    let answer = hookbox
        .server
        .admin_post(
            &format!("/api/destinations/github/default/{action}"),
            serde_json::json!({}),
        )
        .await;
    assert!(
        answer.status().is_success(),
        "{action}: {}",
        answer.status()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn adds_waiting_together_share_a_call_and_each_keeps_its_outcome() {
    let Some(broker) = Broker::start(BrokerKind::Redis).await else {
        return;
    };
    let _: () = ::redis::cmd("SET")
        .arg("hooks:bad")
        .arg("not a stream")
        .query_async(&mut connect(&broker).await)
        .await
        .unwrap();
    let sources = broker_source(
        &format!(
            r#"redis = {{ url = "{}", stream = "hooks:{{/tag}}" }}"#,
            broker.url()
        ),
        2,
    );
    let hookbox = Hookbox::start(&sources).await;
    // Held back while they arrive, so that they all wait at once.
    by_hand(&hookbox, "pause").await;
    let mut sent = BTreeMap::new();
    for n in 0..41 {
        let (id, body) = hookbox.post(if n == 20 { "bad" } else { "good" }, n).await;
        if n != 20 {
            sent.insert(id, body);
        }
    }
    let before = evalsha_calls(&broker).await;
    by_hand(&hookbox, "resume").await;
    hookbox.wait_for("dead", 1, Duration::from_secs(20)).await;
    hookbox
        .wait_for("delivered", 40, Duration::from_secs(20))
        .await;
    // 41 adds, then the refused one's second attempt.
    let calls = evalsha_calls(&broker).await - before;
    assert!(calls < 42, "{calls} calls for 42 adds: none was shared");
    assert_exactly(&sent, &held(&broker, "hooks:good").await);
    let errors: Vec<String> = hookbox
        .attempt_errors()
        .into_iter()
        .filter(|e| !e.is_empty())
        .collect();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors.iter().all(|e| e.contains("WRONGTYPE")), "{errors:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn maxlen_trims_the_stream_approximately() {
    let Some(broker) = Broker::start(BrokerKind::Redis).await else {
        return;
    };
    let hookbox = Hookbox::start(&broker_source(
        &destination(&broker.url(), ", maxlen = 10"),
        5,
    ))
    .await;
    hookbox.post_many("trim", 400).await;
    hookbox
        .wait_for("delivered", 400, Duration::from_secs(30))
        .await;
    let len: usize = ::redis::cmd("XLEN")
        .arg(STREAM)
        .query_async(&mut connect(&broker).await)
        .await
        .unwrap();
    // `MAXLEN ~` trims whole macro nodes (100 entries by default).
    assert!((10..400).contains(&len), "{len} entries left");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_killed_under_load_loses_nothing_and_duplicates_nothing() {
    let Some(mut broker) = Broker::start(BrokerKind::Redis).await else {
        return;
    };
    let hookbox = Hookbox::start(&broker_source(&destination(&broker.url(), ""), 100)).await;
    let down = outage(
        &mut broker,
        Duration::from_millis(600),
        Duration::from_secs(3),
    );
    let sent = post_through(&hookbox, "outage", 80, down).await;
    assert_exactly(&sent, &held(&broker, STREAM).await);
    let errors = hookbox.attempt_errors();
    assert!(
        errors.iter().any(|e| !e.is_empty()),
        "the outage failed no attempt: it was not tested"
    );
    hookbox.assert_never_shows(&broker.password);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_add_whose_reply_is_lost_is_retried_into_one_entry() {
    let Some(broker) = Broker::start(BrokerKind::Redis).await else {
        return;
    };
    let proxy = CutProxy::start(broker.port, b"\"tag\":\"cut\"", Duration::from_millis(500)).await;
    let url = format!(
        "redis://default:{}@127.0.0.1:{}",
        broker.password, proxy.port
    );
    let hookbox = Hookbox::start(&broker_source(&destination(&url, ""), 10)).await;
    // A first event loads the script into Redis, so the cut one runs it
    // at once rather than being answered NOSCRIPT.
    let warm = hookbox.post("warm", 0).await;
    hookbox
        .wait_for("delivered", 1, Duration::from_secs(20))
        .await;
    let cut = hookbox.post("cut", 0).await;
    hookbox
        .wait_for("delivered", 2, Duration::from_secs(20))
        .await;
    assert_eq!(proxy.cuts(), 1, "the proxy never cut the add");
    let errors = hookbox.attempt_errors();
    assert!(
        errors.len() >= 3,
        "the lost reply did not fail an attempt: {errors:?}"
    );
    assert_exactly(&BTreeMap::from([warm, cut]), &held(&broker, STREAM).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_of_another_type_and_a_wrong_password_are_retried_then_dead() {
    let Some(broker) = Broker::start(BrokerKind::Redis).await else {
        return;
    };
    let _: () = ::redis::cmd("SET")
        .arg(STREAM)
        .arg("not a stream")
        .query_async(&mut connect(&broker).await)
        .await
        .unwrap();
    let hookbox = Hookbox::start(&broker_source(&destination(&broker.url(), ""), 3)).await;
    hookbox.post("wrongtype", 0).await;
    hookbox.wait_for("dead", 1, Duration::from_secs(20)).await;
    let errors = hookbox.attempt_errors();
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(errors.iter().all(|e| e.contains("WRONGTYPE")), "{errors:?}");
    drop(hookbox);

    let hookbox = Hookbox::start(&broker_source(
        &destination(&broker.url_with("not-the-password"), ""),
        2,
    ))
    .await;
    hookbox.post("auth", 0).await;
    hookbox.wait_for("dead", 1, Duration::from_secs(20)).await;
    let errors = hookbox.attempt_errors();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors.iter().all(|e| e.contains("connecting to Redis")),
        "{errors:?}"
    );
    assert!(!hookbox.states().contains_key("delivered"));
    hookbox.assert_never_shows("not-the-password");
}

#[tokio::test(flavor = "multi_thread")]
async fn rediss_is_verified_against_the_trusted_roots() {
    let Some(broker) = Broker::start_tls(BrokerKind::Redis).await else {
        return;
    };
    let sent = tls_is_verified_then_delivers(
        &broker,
        &destination(&broker.tls_url(), ""),
        "connecting to Redis",
    )
    .await;
    assert_exactly(&sent, &held(&broker, STREAM).await);
}
