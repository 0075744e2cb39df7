//! `--broker KIND` runs (`deliver_nats`, `deliver_redis`, `deliver_amqp`,
//! `deliver_mqtt`): the same ingest as `--deliver`, with the source's one
//! destination a real broker on loopback instead of the url downstream.
//!
//! [`Broker::start`] starts the server ([`process`]) and creates what the
//! kind needs before hookbox starts: a file-stored JetStream stream
//! capturing `hooks.>`, a durable topic exchange with a durable queue
//! bound to `hooks.#`, a subscriber to `hooks/#` (MQTT keeps nothing a
//! subscriber did not take). [`Broker::held`] counts what the broker holds
//! after hookbox stopped, for the check that it is exactly the delivered
//! rows. Delivered/s is read from the database ([`progress`]): there is no
//! downstream to time arrivals.

pub mod process;
pub mod progress;

use anyhow::{Context, Result, bail};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use process::{Process, USER};

const NATS_STREAM: &str = "BENCH";
/// `hooks:{source}` for the bench's `github` source.
const REDIS_STREAM: &str = "hooks:github";
const AMQP_EXCHANGE: &str = "hookbox";
const AMQP_QUEUE: &str = "hooks";

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    Nats,
    Redis,
    Amqp,
    Mqtt,
}

impl Kind {
    pub fn scenario(self) -> &'static str {
        match self {
            Kind::Nats => "deliver_nats",
            Kind::Redis => "deliver_redis",
            Kind::Amqp => "deliver_amqp",
            Kind::Mqtt => "deliver_mqtt",
        }
    }
}

/// A running broker, ready for hookbox.
pub struct Broker {
    pub kind: Kind,
    process: Process,
    /// MQTT: what the subscriber has received so far.
    received: Option<(Arc<AtomicU64>, tokio::task::JoinHandle<()>)>,
}

impl Broker {
    pub async fn start(kind: Kind) -> Result<Broker> {
        let process = Process::start(kind).await?;
        let mut broker = Broker {
            kind,
            process,
            received: None,
        };
        broker
            .prepare()
            .await
            .with_context(|| format!("preparing {kind:?}:\n{}", broker.process.log()))?;
        Ok(broker)
    }

    fn url(&self) -> String {
        let (pw, port) = (&self.process.password, self.process.port);
        match self.kind {
            Kind::Nats => format!("nats://{USER}:{pw}@127.0.0.1:{port}"),
            Kind::Redis => format!("redis://default:{pw}@127.0.0.1:{port}"),
            Kind::Amqp => format!("amqp://{USER}:{pw}@127.0.0.1:{port}/%2f"),
            Kind::Mqtt => format!("mqtt://127.0.0.1:{port}"),
        }
    }

    /// CPU time the broker's processes have used so far.
    pub fn cpu(&self, ticks_per_sec: f64) -> Result<std::time::Duration> {
        self.process.cpu(ticks_per_sec)
    }

    /// The source's destination: the line of its `[sources.deliver]`.
    pub fn destination(&self) -> String {
        let url = self.url();
        match self.kind {
            Kind::Nats => format!(r#"nats = {{ url = "{url}", subject = "hooks.{{source}}" }}"#),
            Kind::Redis => format!(r#"redis = {{ url = "{url}", stream = "hooks:{{source}}" }}"#),
            Kind::Amqp => format!(
                r#"amqp = {{ url = "{url}", exchange = "{AMQP_EXCHANGE}", routing_key = "hooks.{{source}}" }}"#
            ),
            Kind::Mqtt => {
                format!(r#"mqtt = {{ url = "{url}", topic = "hooks/{{source}}", qos = 1 }}"#)
            }
        }
    }

    async fn prepare(&mut self) -> Result<()> {
        match self.kind {
            Kind::Nats => {
                use async_nats::jetstream::{self, stream};
                jetstream::new(self.nats().await?)
                    .create_stream(stream::Config {
                        name: NATS_STREAM.into(),
                        subjects: vec!["hooks.>".into()],
                        storage: stream::StorageType::File,
                        ..Default::default()
                    })
                    .await
                    .context("creating the JetStream stream")?;
            }
            Kind::Redis => {}
            Kind::Amqp => {
                use lapin::ExchangeKind;
                use lapin::options::{ExchangeDeclareOptions, QueueBindOptions};
                use lapin::types::FieldTable;
                let (_connection, channel) = self.amqp().await?;
                let durable = ExchangeDeclareOptions {
                    durable: true,
                    ..Default::default()
                };
                channel
                    .exchange_declare(
                        AMQP_EXCHANGE.into(),
                        ExchangeKind::Topic,
                        durable,
                        FieldTable::default(),
                    )
                    .await
                    .context("declaring the exchange")?;
                declare_queue(&channel, false).await?;
                channel
                    .queue_bind(
                        AMQP_QUEUE.into(),
                        AMQP_EXCHANGE.into(),
                        "hooks.#".into(),
                        QueueBindOptions::default(),
                        FieldTable::default(),
                    )
                    .await
                    .context("binding the queue")?;
            }
            Kind::Mqtt => self.received = Some(self.subscribe().await?),
        }
        Ok(())
    }

    async fn nats(&self) -> Result<async_nats::Client> {
        async_nats::ConnectOptions::with_user_and_password(
            USER.into(),
            self.process.password.clone(),
        )
        .connect(format!("127.0.0.1:{}", self.process.port))
        .await
        .context("connecting to NATS")
    }

    async fn amqp(&self) -> Result<(lapin::Connection, lapin::Channel)> {
        use lapin::{Connection, ConnectionProperties};
        // RabbitMQ opens its port a moment before it takes logins.
        let deadline = Instant::now() + Duration::from_secs(60);
        let connection = loop {
            match Connection::connect(&self.url(), ConnectionProperties::default()).await {
                Ok(c) => break c,
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e).context("connecting to RabbitMQ"),
            }
        };
        let channel = connection
            .create_channel()
            .await
            .context("opening a channel")?;
        Ok((connection, channel))
    }

    /// A clean-session MQTT subscriber to `hooks/#` at QoS 1, counting
    /// what it receives; subscribed when this returns.
    async fn subscribe(&self) -> Result<(Arc<AtomicU64>, tokio::task::JoinHandle<()>)> {
        use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
        let mut options = MqttOptions::new("bench-sub", "127.0.0.1", self.process.port);
        options.set_max_packet_size(1 << 20, 1 << 20);
        let (client, mut events) = AsyncClient::new(options, 1024);
        client
            .subscribe("hooks/#", QoS::AtLeastOnce)
            .await
            .context("subscribing")?;
        let count = Arc::new(AtomicU64::new(0));
        let (subscribed, is_subscribed) = tokio::sync::oneshot::channel();
        let mut subscribed = Some(subscribed);
        let into = Arc::clone(&count);
        let task = tokio::spawn(async move {
            let _client = client;
            loop {
                match events.poll().await {
                    Ok(Event::Incoming(Packet::SubAck(_))) => {
                        if let Some(s) = subscribed.take() {
                            let _ = s.send(());
                        }
                    }
                    Ok(Event::Incoming(Packet::Publish(_))) => {
                        into.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        eprintln!("MQTT subscriber: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(10), is_subscribed)
            .await
            .context("no SUBACK within 10 s")?
            .context("the subscriber stopped")?;
        Ok((count, task))
    }

    /// How many messages the broker holds (MQTT: the subscriber received),
    /// read after hookbox stopped. `expect` is the delivered rows: the
    /// MQTT subscriber may still be catching up, so it is waited for (up
    /// to 30 s) and then read once more.
    pub async fn held(&self, expect: u64) -> Result<u64> {
        match self.kind {
            Kind::Nats => {
                let js = async_nats::jetstream::new(self.nats().await?);
                let mut stream = js
                    .get_stream(NATS_STREAM)
                    .await
                    .context("reading the stream")?;
                Ok(stream.info().await.context("stream info")?.state.messages)
            }
            Kind::Redis => {
                let client = redis::Client::open(self.url()).context("the Redis url")?;
                let mut c = client
                    .get_multiplexed_async_connection()
                    .await
                    .context("connecting to Redis")?;
                redis::cmd("XLEN")
                    .arg(REDIS_STREAM)
                    .query_async(&mut c)
                    .await
                    .context("XLEN")
            }
            Kind::Amqp => {
                let (_connection, channel) = self.amqp().await?;
                Ok(u64::from(declare_queue(&channel, true).await?))
            }
            Kind::Mqtt => {
                let Some((count, _)) = &self.received else {
                    bail!("no subscriber");
                };
                let deadline = Instant::now() + Duration::from_secs(30);
                while count.load(Ordering::Relaxed) < expect && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                // Anything beyond `expect` (a duplicate) has time to show.
                tokio::time::sleep(Duration::from_millis(500)).await;
                Ok(count.load(Ordering::Relaxed))
            }
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some((_, task)) = &self.received {
            task.abort();
        }
    }
}

/// The durable queue (`passive`: only its message count), a classic
/// queue of version 2: RabbitMQ 3.10's version 1 spent about a third more
/// of the broker's CPU per persistent message, and a drain into it made
/// 6.5k/s against 8.0k/s (benchmark page, 2026-12-07); version 2 is the
/// default from 3.13 on.
async fn declare_queue(channel: &lapin::Channel, passive: bool) -> Result<u32> {
    use lapin::options::QueueDeclareOptions;
    use lapin::types::FieldTable;
    let options = QueueDeclareOptions {
        durable: true,
        passive,
        ..Default::default()
    };
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-queue-version".into(),
        lapin::types::AMQPValue::LongInt(2),
    );
    let queue = channel
        .queue_declare(AMQP_QUEUE.into(), options, arguments)
        .await
        .context("declaring the queue")?;
    Ok(queue.message_count())
}
