//! `amqp`: a real RabbitMQ. It takes 8-18 s to start, so one server
//! serves every scenario here, in one test, one after the other.

use std::collections::BTreeMap;
use std::time::Duration;

use lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};

use super::*;

const EXCHANGE: &str = "hookbox";
const QUEUE: &str = "hooks";

async fn channel(broker: &Broker) -> (Connection, Channel) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    // RabbitMQ opens its port a moment before it takes logins.
    let connection = loop {
        match Connection::connect(&broker.url(), ConnectionProperties::default()).await {
            Ok(connection) => break connection,
            Err(e) if std::time::Instant::now() < deadline => {
                eprintln!("RabbitMQ not ready yet: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("connecting to RabbitMQ: {e}\n{}", broker.log()),
        }
    };
    let channel = connection.create_channel().await.unwrap();
    (connection, channel)
}

/// A durable topic exchange and a durable queue taking `hooks.#`.
async fn declare(broker: &Broker) {
    let (_connection, channel) = channel(broker).await;
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    channel
        .exchange_declare(
            EXCHANGE.into(),
            ExchangeKind::Topic,
            durable,
            FieldTable::default(),
        )
        .await
        .unwrap();
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    channel
        .queue_declare(QUEUE.into(), durable, FieldTable::default())
        .await
        .unwrap();
    channel
        .queue_bind(
            QUEUE.into(),
            EXCHANGE.into(),
            "hooks.#".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
}

/// Takes every message off the queue.
async fn drain(broker: &Broker) -> Vec<Held> {
    let (_connection, channel) = channel(broker).await;
    let mut held = Vec::new();
    let no_ack = BasicGetOptions { no_ack: true };
    while let Some(message) = channel.basic_get(QUEUE.into(), no_ack).await.unwrap() {
        let properties = &message.delivery.properties;
        assert_eq!(*properties.delivery_mode(), Some(2), "persistent");
        let mut meta: BTreeMap<String, String> = properties
            .headers()
            .as_ref()
            .map(|h| {
                h.inner()
                    .iter()
                    .map(|(k, v)| {
                        let AMQPValue::LongString(v) = v else {
                            panic!("{k}: {v:?}")
                        };
                        (
                            k.to_string(),
                            String::from_utf8(v.as_bytes().to_vec()).unwrap(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let id = properties.message_id().as_ref().map(ShortString::to_string);
        meta.insert("message-id".into(), id.unwrap_or_default());
        held.push(Held {
            meta,
            body: message.delivery.data,
        });
    }
    held
}

fn destination(url: &str, routing_key: &str) -> String {
    format!(r#"amqp = {{ url = "{url}", exchange = "{EXCHANGE}", routing_key = "{routing_key}" }}"#)
}

#[tokio::test(flavor = "multi_thread")]
async fn rabbitmq_confirms_every_event_refuses_unroutable_ones_and_survives_a_kill() {
    let Some(mut broker) = Broker::start_tls(BrokerKind::Rabbit).await else {
        return;
    };
    declare(&broker).await;
    let good = destination(&broker.url(), "hooks.{source}.{event_type}");

    // N posted, N in the queue, each with its message id and metadata.
    let hookbox = Hookbox::start(&broker_source(&good, 5)).await;
    let sent = hookbox.post_many("amqp", 30).await;
    hookbox
        .wait_for("delivered", 30, Duration::from_secs(30))
        .await;
    let held = drain(&broker).await;
    let ids: std::collections::BTreeSet<&String> =
        held.iter().map(|m| &m.meta["message-id"]).collect();
    assert_eq!(ids.len(), held.len(), "one message_id per delivery");
    assert!(ids.iter().all(|id| id.starts_with("hbx_")), "{ids:?}");
    assert_exactly(&sent, &held);
    hookbox.assert_never_shows(&broker.password);
    drop(hookbox);

    // Unroutable (no queue bound for the key) and a wrong password:
    // retried with the reason, then dead.
    let hookbox = Hookbox::start(&broker_source(
        &destination(&broker.url(), "nowhere.{source}"),
        3,
    ))
    .await;
    hookbox.post("unroutable", 0).await;
    hookbox.wait_for("dead", 1, Duration::from_secs(30)).await;
    let errors = hookbox.attempt_errors();
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(
        errors.iter().all(|e| e.contains("unroutable")),
        "{errors:?}"
    );
    drop(hookbox);
    let hookbox = Hookbox::start(&broker_source(
        &destination(&broker.url_with("not-the-password"), "hooks.x"),
        2,
    ))
    .await;
    hookbox.post("auth", 0).await;
    hookbox.wait_for("dead", 1, Duration::from_secs(30)).await;
    let errors = hookbox.attempt_errors();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors
            .iter()
            .all(|e| e.contains("connecting to the AMQP broker")),
        "{errors:?}"
    );
    hookbox.assert_never_shows("not-the-password");
    drop(hookbox);
    assert!(
        drain(&broker).await.is_empty(),
        "a refused event reached the queue"
    );

    // amqps: refused until the test CA is trusted, then delivered.
    let sent = tls_is_verified_then_delivers(
        &broker,
        &destination(&broker.tls_url(), "hooks.{source}"),
        "connecting to the AMQP broker",
    )
    .await;
    assert_exactly(&sent, &drain(&broker).await);

    // Killed under load: every event there after the restart, at least
    // once (AMQP cannot dedupe a publish whose confirm was lost).
    let hookbox = Hookbox::start(&broker_source(&good, 200)).await;
    let down = outage(
        &mut broker,
        Duration::from_millis(600),
        Duration::from_secs(2),
    );
    let sent = post_through(&hookbox, "outage", 60, down).await;
    let held = drain(&broker).await;
    assert_at_least_once(&sent, &held);
    assert!(
        hookbox.attempt_errors().iter().any(|e| !e.is_empty()),
        "the outage failed no attempt: it was not tested"
    );
    hookbox.assert_never_shows(&broker.password);
}
