//! `mqtt`: MQTT 5 to a real Mosquitto, with a password and an ACL that
//! allows `hooks/#` only.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;

/// What a subscriber received, as it arrives.
type Got = Arc<Mutex<Vec<Held>>>;

/// An MQTT 5 subscriber to `hooks/#` (it sees the user properties); it
/// has its subscription when this returns.
async fn subscribe_v5(broker: &Broker) -> (Got, tokio::task::JoinHandle<()>) {
    use rumqttc::v5::mqttbytes::QoS;
    use rumqttc::v5::mqttbytes::v5::Packet;
    use rumqttc::v5::{AsyncClient, Event, MqttOptions};
    let mut options = MqttOptions::new("test-sub-v5", "127.0.0.1", broker.port);
    options.set_credentials(BROKER_USER, broker.password.clone());
    let (client, mut events) = AsyncClient::new(options, 64);
    client.subscribe("hooks/#", QoS::AtLeastOnce).await.unwrap();
    let got: Got = Arc::default();
    let (subscribed, is_subscribed) = tokio::sync::oneshot::channel();
    let mut subscribed = Some(subscribed);
    let into = got.clone();
    let task = tokio::spawn(async move {
        let _client = client;
        loop {
            match events.poll().await {
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    if let Some(s) = subscribed.take() {
                        let _ = s.send(());
                    }
                }
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    let meta = p
                        .properties
                        .map(|p| p.user_properties.into_iter().collect())
                        .unwrap_or_default();
                    into.lock().unwrap().push(Held {
                        meta,
                        body: p.payload.to_vec(),
                    });
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    });
    is_subscribed.await.unwrap();
    (got, task)
}

/// An MQTT 3.1.1 subscriber with a persistent session, which Mosquitto
/// keeps across its restart (2.0 does not restore MQTT 5 sessions): it
/// reconnects and receives what waited. It sees bodies only.
async fn subscribe_persistent(broker: &Broker) -> (Got, tokio::task::JoinHandle<()>) {
    use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
    let mut options = MqttOptions::new("test-sub-persistent", "127.0.0.1", broker.port);
    options
        .set_credentials(BROKER_USER, broker.password.clone())
        .set_clean_session(false);
    let (client, mut events) = AsyncClient::new(options, 64);
    client.subscribe("hooks/#", QoS::AtLeastOnce).await.unwrap();
    let got: Got = Arc::default();
    let (subscribed, is_subscribed) = tokio::sync::oneshot::channel();
    let mut subscribed = Some(subscribed);
    let into = got.clone();
    let task = tokio::spawn(async move {
        let _client = client;
        loop {
            match events.poll().await {
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    if let Some(s) = subscribed.take() {
                        let _ = s.send(());
                    }
                }
                Ok(Event::Incoming(Packet::Publish(p))) => into.lock().unwrap().push(Held {
                    meta: BTreeMap::new(),
                    body: p.payload.to_vec(),
                }),
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    });
    is_subscribed.await.unwrap();
    // Saved (autosave on every change) before any kill.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    (got, task)
}

/// Waits until `got` has at least `n` distinct bodies.
async fn wait_got(got: &Got, n: usize) -> Vec<Held> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let held = got.lock().unwrap().clone();
        let distinct: std::collections::BTreeSet<&Vec<u8>> = held.iter().map(|m| &m.body).collect();
        if distinct.len() >= n {
            return held;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the subscriber got {} of {n}",
            distinct.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn destination(url: &str, topic: &str, qos: u8) -> String {
    format!(r#"mqtt = {{ url = "{url}", topic = "{topic}", qos = {qos} }}"#)
}

#[tokio::test(flavor = "multi_thread")]
async fn every_event_is_published_with_its_metadata_at_qos_1_and_2() {
    let Some(broker) = Broker::start(BrokerKind::Mosquitto).await else {
        return;
    };
    for qos in [1, 2] {
        let (got, task) = subscribe_v5(&broker).await;
        let topic = "hooks/{source}/{event_type}/{/repository/full_name}";
        let hookbox =
            Hookbox::start(&broker_source(&destination(&broker.url(), topic, qos), 5)).await;
        let sent = hookbox.post_many(&format!("qos{qos}"), 30).await;
        hookbox
            .wait_for("delivered", 30, Duration::from_secs(20))
            .await;
        let held = wait_got(&got, 30).await;
        task.abort();
        assert_exactly(&sent, &held);
        hookbox.assert_never_shows(&broker.password);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broker_killed_under_load_has_every_event_after_its_restart() {
    let Some(mut broker) = Broker::start(BrokerKind::Mosquitto).await else {
        return;
    };
    let (got, task) = subscribe_persistent(&broker).await;
    let hookbox = Hookbox::start(&broker_source(
        &destination(&broker.url(), "hooks/{source}", 1),
        100,
    ))
    .await;
    let down = outage(
        &mut broker,
        Duration::from_millis(600),
        Duration::from_secs(3),
    );
    let sent = post_through(&hookbox, "outage", 80, down).await;
    let held = wait_got(&got, sent.len()).await;
    task.abort();
    assert_at_least_once(&sent, &held);
    assert!(
        hookbox.attempt_errors().iter().any(|e| !e.is_empty()),
        "the outage failed no attempt: it was not tested"
    );
    hookbox.assert_never_shows(&broker.password);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_topic_the_acl_refuses_and_a_wrong_password_are_retried_then_dead() {
    let Some(broker) = Broker::start(BrokerKind::Mosquitto).await else {
        return;
    };
    let hookbox = Hookbox::start(&broker_source(
        &destination(&broker.url(), "forbidden/{source}", 1),
        3,
    ))
    .await;
    hookbox.post("acl", 0).await;
    hookbox.wait_for("dead", 1, Duration::from_secs(20)).await;
    let errors = hookbox.attempt_errors();
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(
        errors
            .iter()
            .all(|e| e.contains("refused the message (PUBACK NotAuthorized)")),
        "{errors:?}"
    );
    drop(hookbox);

    let hookbox = Hookbox::start(&broker_source(
        &destination(&broker.url_with("not-the-password"), "hooks/x", 1),
        2,
    ))
    .await;
    hookbox.post("auth", 0).await;
    hookbox.wait_for("dead", 1, Duration::from_secs(20)).await;
    let errors = hookbox.attempt_errors();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors
            .iter()
            .all(|e| e.contains("connecting to the MQTT broker") && e.contains("NotAuthorized")),
        "{errors:?}"
    );
    assert!(!hookbox.states().contains_key("delivered"));
    hookbox.assert_never_shows("not-the-password");
}

#[tokio::test(flavor = "multi_thread")]
async fn mqtts_is_verified_against_the_trusted_roots() {
    let Some(broker) = Broker::start_tls(BrokerKind::Mosquitto).await else {
        return;
    };
    let (got, task) = subscribe_v5(&broker).await;
    let sent = tls_is_verified_then_delivers(
        &broker,
        &destination(&broker.tls_url(), "hooks/{source}", 1),
        "connecting to the MQTT broker",
    )
    .await;
    let held = wait_got(&got, sent.len()).await;
    task.abort();
    assert_exactly(&sent, &held);
}
