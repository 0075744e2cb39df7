//! Dispatch: handing stored events to the user's code, one attempt at a time.
//!
//! This module owns the push kinds of destination: [`url`] POSTs a Standard
//! Webhooks-signed request, [`command`] runs a program with the body on
//! stdin, [`broker`] publishes to NATS, Redis, RabbitMQ or MQTT, and
//! hookbox's outbound signature ([`sign`]). Each makes one
//! attempt by the contract of `crate::delivery` (a `Job` in, an `Attempt`
//! out) and never touches the database: the caller records it.
//!
//! The loop that claims due events and runs these attempts within each
//! source's concurrency limit is [`worker`]; the settle rule, the breaker
//! and the pauses are `crate::delivery`'s, claiming and per-key ordering
//! are SQL, in `crate::store::deliveries`.

pub mod broker;
pub mod command;
pub mod sign;
pub mod trial;
pub mod url;
pub mod worker;

use std::sync::Arc;

use crate::config::{self, DeliverConfig};
use crate::delivery::Destination;

/// What the push destinations of a process share, made once at start-up.
pub struct Shared {
    /// The process-wide client from [`url::client`], shared by every url
    /// destination so connections are pooled.
    pub client: reqwest::Client,
    /// The variables a command must not inherit (`Config::secret_env`).
    pub withheld: Arc<[String]>,
}

/// The push destination `config` describes, ready to run jobs; `None` for
/// a pull destination: nothing is pushed to it (`crate::delivery::pull`). One arm
/// per kind: a new kind is its own file implementing [`Destination`], its
/// config, and its arm here.
pub fn destination(config: &DeliverConfig, shared: &Shared) -> Option<Arc<dyn Destination>> {
    Some(match &config.destination {
        config::Destination::Url {
            url,
            signing_key,
            options,
        } => Arc::new(
            url::UrlDestination::new(
                shared.client.clone(),
                url.expose().clone(),
                signing_key.clone(),
                config.timeout,
                config.permanent_statuses.clone(),
            )
            .with_options(options.clone()),
        ),
        config::Destination::Command { template, .. } => {
            Arc::new(command::CommandDestination::new(
                template.clone(),
                config.timeout,
                shared.withheld.clone(),
            ))
        }
        config::Destination::Pull { .. } => return None,
        config::Destination::Nats(nats) => Arc::new(broker::nats::NatsDestination::new(
            nats.clone(),
            config.timeout,
        )),
        config::Destination::Redis(redis) => Arc::new(broker::redis::RedisDestination::new(
            redis.clone(),
            config.timeout,
        )),
        config::Destination::Amqp(amqp) => Arc::new(broker::amqp::AmqpDestination::new(
            amqp.clone(),
            config.timeout,
        )),
        config::Destination::Mqtt(mqtt) => Arc::new(broker::mqtt::MqttDestination::new(
            mqtt.clone(),
            config.timeout,
        )),
    })
}
