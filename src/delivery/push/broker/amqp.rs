//! `amqp`: a RabbitMQ (AMQP 0-9-1) publish, delivered on its publisher
//! confirm.
//!
//! The channel is in confirm mode; each message is persistent
//! (`delivery_mode` 2), `mandatory` (a message no queue takes comes back
//! and is a failed attempt, never silently dropped) and carries the
//! delivery's [`message_id`] as `message_id`, the metadata as headers and
//! the stored content type. RabbitMQ confirms a persistent message routed
//! to durable queues once they have it on disk. AMQP has no deduplication:
//! a publish whose confirm was lost is published again, so a consumer
//! dedupes on `message_id` (or `hookbox-source` + `hookbox-delivery-id`).
//!
//! Any error closes the connection's use: the next attempt opens a new
//! connection and channel (a publish to a missing exchange closes the
//! channel on the broker's side, too).

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};

use super::{Link, Scrub, ended, message_id, metadata, names, retry};
use crate::config::broker::amqp::AmqpConfig;
use crate::delivery::{Attempt, Destination, Job, Outcome};

/// The connection (kept so it lives) and its one confirm-mode channel.
struct Open {
    _connection: Connection,
    channel: Channel,
}

pub struct AmqpDestination {
    config: AmqpConfig,
    timeout: Duration,
    scrub: Scrub,
    link: Link<Arc<Open>>,
}

impl Destination for AmqpDestination {
    fn deliver<'a>(&'a self, job: &'a Job) -> Pin<Box<dyn Future<Output = Attempt> + Send + 'a>> {
        Box::pin(AmqpDestination::deliver(self, job))
    }
}

impl AmqpDestination {
    /// `timeout` bounds connecting and each publish until its confirm.
    pub fn new(config: AmqpConfig, timeout: Duration) -> Self {
        AmqpDestination {
            scrub: Scrub::new(&config.url),
            config,
            timeout,
            link: Link::default(),
        }
    }

    async fn open(&self) -> Result<Arc<Open>, String> {
        let open = async {
            let properties =
                ConnectionProperties::default().with_connection_name(LongString::from("hookbox"));
            let connection = Connection::connect(self.config.url.expose(), properties)
                .await
                .map_err(|e| self.scrub.text("connecting to the AMQP broker", e))?;
            let channel = connection
                .create_channel()
                .await
                .map_err(|e| self.scrub.text("opening an AMQP channel", e))?;
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await
                .map_err(|e| self.scrub.text("turning on publisher confirms", e))?;
            Ok(Arc::new(Open {
                _connection: connection,
                channel,
            }))
        };
        tokio::time::timeout(self.timeout, open)
            .await
            .map_err(|_| {
                format!(
                    "connecting to the AMQP broker timed out after {:?}",
                    self.timeout
                )
            })?
    }

    pub async fn deliver(&self, job: &Job) -> Attempt {
        let started = Instant::now();
        let routing_key = match self.config.routing_key.render(&names(job)) {
            Ok(key) => key,
            Err(why) => return ended(started, Outcome::Dead, Some(why)),
        };
        let (n, open) = match self.link.get(self.open()).await {
            Ok(link) => link,
            Err(e) => return retry(started, e),
        };
        if !open.channel.status().connected() {
            self.link.broken(n).await;
            return retry(
                started,
                "the AMQP channel was closed; reconnecting".to_owned(),
            );
        }
        let options = BasicPublishOptions {
            mandatory: true,
            immediate: false,
        };
        let published = tokio::time::timeout(self.timeout, async {
            open.channel
                .basic_publish(
                    ShortString::from(self.config.exchange.as_str()),
                    ShortString::from(routing_key.as_str()),
                    options,
                    &job.body,
                    properties(job),
                )
                .await?
                .await
        })
        .await;
        let confirmation = match published {
            Ok(Ok(confirmation)) => confirmation,
            Ok(Err(e)) => {
                self.link.broken(n).await;
                return retry(started, self.scrub.text("publishing to AMQP", e));
            }
            Err(_) => {
                self.link.broken(n).await;
                return retry(
                    started,
                    format!(
                        "no publisher confirm within {:?} (outcome unknown)",
                        self.timeout
                    ),
                );
            }
        };
        match confirmation {
            Confirmation::Ack(None) => ended(started, Outcome::Delivered, None),
            Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned)) => retry(
                started,
                format!(
                    "unroutable: the exchange {:?} routed the routing key {routing_key:?} to no queue ({} {})",
                    self.config.exchange, returned.reply_code, returned.reply_text
                ),
            ),
            Confirmation::Nack(None) => retry(
                started,
                "the broker refused the message (publisher confirm nack)".to_owned(),
            ),
            Confirmation::NotRequested => retry(
                started,
                "the channel is not in confirm mode; nothing was confirmed".to_owned(),
            ),
        }
    }
}

/// Persistent, with the message id, the metadata as headers, and the
/// stored content type.
fn properties(job: &Job) -> BasicProperties {
    let mut headers = FieldTable::default();
    for (name, value) in metadata(job) {
        headers.insert(
            ShortString::from(name),
            AMQPValue::LongString(LongString::from(value)),
        );
    }
    let mut properties = BasicProperties::default()
        .with_delivery_mode(2)
        .with_message_id(ShortString::from(message_id(job)))
        .with_app_id(ShortString::from("hookbox"))
        .with_headers(headers);
    if let Some(content_type) = job
        .content_type
        .as_deref()
        .and_then(|ct| ShortString::try_new(ct.to_owned()).ok())
    {
        properties = properties.with_content_type(content_type);
    }
    properties
}
