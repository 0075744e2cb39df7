//! `nats`: JetStream on a real `nats-server -js`.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::{self, stream};

use super::*;

const STREAM: &str = "HOOKS";

async fn jetstream(broker: &Broker) -> jetstream::Context {
    let options = async_nats::ConnectOptions::with_user_and_password(
        BROKER_USER.into(),
        broker.password.clone(),
    );
    let client = if broker.tls_port.is_some() {
        options
            .add_root_certificates(broker.ca_file())
            .require_tls(true)
            .connect(format!("tls://localhost:{}", broker.port))
            .await
    } else {
        options.connect(format!("127.0.0.1:{}", broker.port)).await
    };
    jetstream::new(client.unwrap())
}

/// A file-stored stream capturing `hooks.>`.
async fn create_stream(broker: &Broker) {
    jetstream(broker)
        .await
        .create_stream(stream::Config {
            name: STREAM.into(),
            subjects: vec!["hooks.>".into()],
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .unwrap();
}

/// Every message of the stream, in order, with its subject.
async fn held(broker: &Broker) -> Vec<(String, Held)> {
    let js = jetstream(broker).await;
    let mut stream = js.get_stream(STREAM).await.unwrap();
    let info = stream.info().await.unwrap().clone();
    let mut held = Vec::new();
    for seq in info.state.first_sequence..=info.state.last_sequence {
        if info.state.messages == 0 {
            break;
        }
        let message = stream.get_raw_message(seq).await.unwrap();
        let meta: BTreeMap<String, String> = message
            .headers
            .iter()
            .map(|(k, v)| (k.to_string().to_lowercase(), v[0].to_string()))
            .collect();
        held.push((
            message.subject.to_string(),
            Held {
                meta,
                body: message.payload.to_vec(),
            },
        ));
    }
    held
}

fn destination(url: &str) -> String {
    format!(
        r#"nats = {{ url = "{url}", subject = "hooks.{{source}}.{{event_type}}.{{/repository/full_name}}" }}"#
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn every_event_lands_in_the_stream_once_with_its_metadata() {
    let Some(broker) = Broker::start(BrokerKind::Nats).await else {
        return;
    };
    create_stream(&broker).await;
    let hookbox = Hookbox::start(&broker_source(&destination(&broker.url()), 5)).await;
    let sent = hookbox.post_many("nats", 30).await;
    hookbox
        .wait_for("delivered", 30, Duration::from_secs(20))
        .await;

    let held = held(&broker).await;
    for (subject, message) in &held {
        // `acme/r1` is one token: its `/` made safe.
        assert!(subject.starts_with("hooks.github.push.acme_r"), "{subject}");
        let msg_id = &message.meta["nats-msg-id"];
        assert!(msg_id.starts_with("hbx_"), "{msg_id}");
        assert_eq!(message.meta["content-type"], "application/json");
    }
    let ids: std::collections::BTreeSet<&String> =
        held.iter().map(|(_, m)| &m.meta["nats-msg-id"]).collect();
    assert_eq!(ids.len(), held.len(), "one Nats-Msg-Id per delivery");
    let held: Vec<Held> = held.into_iter().map(|(_, m)| m).collect();
    assert_exactly(&sent, &held);
    hookbox.assert_never_shows(&broker.password);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_killed_under_load_loses_nothing_and_duplicates_nothing() {
    let Some(mut broker) = Broker::start(BrokerKind::Nats).await else {
        return;
    };
    create_stream(&broker).await;
    let hookbox = Hookbox::start(&broker_source(&destination(&broker.url()), 100)).await;
    let down = outage(
        &mut broker,
        Duration::from_millis(600),
        Duration::from_secs(3),
    );
    let sent = post_through(&hookbox, "outage", 80, down).await;
    let held: Vec<Held> = held(&broker).await.into_iter().map(|(_, m)| m).collect();
    assert_exactly(&sent, &held);
    let errors = hookbox.attempt_errors();
    assert!(
        errors.iter().any(|e| !e.is_empty()),
        "the outage failed no attempt: it was not tested"
    );
    hookbox.assert_never_shows(&broker.password);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_publish_whose_ack_is_lost_is_retried_into_one_message() {
    let Some(broker) = Broker::start(BrokerKind::Nats).await else {
        return;
    };
    create_stream(&broker).await;
    // The NATS protocol line of the publish of the event tagged `cut`
    // carries its delivery id in the Nats-Msg-Id header, but the id is
    // hashed; the body's tag is in the payload that follows it.
    let proxy = CutProxy::start(broker.port, b"\"tag\":\"cut\"", Duration::from_millis(500)).await;
    let url = format!(
        "nats://{BROKER_USER}:{}@127.0.0.1:{}",
        broker.password, proxy.port
    );
    let hookbox = Hookbox::start(&broker_source(&destination(&url), 10)).await;
    let (id, body) = hookbox.post("cut", 0).await;
    hookbox
        .wait_for("delivered", 1, Duration::from_secs(20))
        .await;
    assert_eq!(proxy.cuts(), 1, "the proxy never cut the publish");
    let errors = hookbox.attempt_errors();
    assert!(
        errors.len() >= 2,
        "the lost ack did not fail an attempt: {errors:?}"
    );
    let held: Vec<Held> = held(&broker).await.into_iter().map(|(_, m)| m).collect();
    assert_exactly(&BTreeMap::from([(id, body)]), &held);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subject_no_stream_captures_and_a_wrong_password_are_retried_then_dead() {
    let Some(broker) = Broker::start(BrokerKind::Nats).await else {
        return;
    };
    // No stream at all.
    let hookbox = Hookbox::start(&broker_source(&destination(&broker.url()), 3)).await;
    hookbox.post("nostream", 0).await;
    hookbox.wait_for("dead", 1, Duration::from_secs(20)).await;
    let errors = hookbox.attempt_errors();
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(
        errors
            .iter()
            .all(|e| e.contains("no JetStream stream captures the subject")),
        "{errors:?}"
    );
    drop(hookbox);

    let wrong = broker.url_with("not-the-password");
    let hookbox = Hookbox::start(&broker_source(&destination(&wrong), 2)).await;
    hookbox.post("auth", 0).await;
    hookbox.wait_for("dead", 1, Duration::from_secs(20)).await;
    let errors = hookbox.attempt_errors();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors.iter().all(|e| e.contains("connecting to NATS")),
        "{errors:?}"
    );
    assert!(!hookbox.states().contains_key("delivered"));
    hookbox.assert_never_shows("not-the-password");
}

#[tokio::test(flavor = "multi_thread")]
async fn nats_tls_is_verified_against_the_trusted_roots() {
    let Some(broker) = Broker::start_tls(BrokerKind::Nats).await else {
        return;
    };
    create_stream(&broker).await;
    let sent = tls_is_verified_then_delivers(
        &broker,
        &destination(&broker.tls_url()),
        "connecting to NATS",
    )
    .await;
    let held: Vec<Held> = held(&broker).await.into_iter().map(|(_, m)| m).collect();
    assert_exactly(&sent, &held);
}
