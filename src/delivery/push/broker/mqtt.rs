//! `mqtt`: an MQTT 5 publish at QoS 1 (delivered on PUBACK) or 2 (on
//! PUBCOMP), never retained, with the metadata as user properties and the
//! stored content type as the content type property.
//!
//! rumqttc runs the connection in an event loop that reports, in order,
//! the packet id each publish was given and the acks that come back; a
//! task per connection (`drive`) pairs each attempt with its packet id
//! and its ack. Publishes leave in the order they were queued, so the
//! n-th "sent" event is the n-th queued publish; brokers ack in order, so
//! packet ids are not reused while an earlier one waits. A PUBACK or
//! PUBREC with an error reason (not authorized, quota exceeded, ...) is a
//! failed attempt that says so.
//!
//! When the connection breaks, every waiting attempt fails and the task
//! ends; the next attempt opens a new connection with a clean start
//! (rumqttc's own replay of unacknowledged publishes is not used: hookbox
//! retries them itself). A publish whose ack was lost is sent again:
//! MQTT has no deduplication across connections, so consumers dedupe on
//! the `hookbox-delivery-id` user property.

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{
    ConnectReturnCode, Packet, PubAckReason, PubRecReason, PublishProperties,
};
use rumqttc::v5::{AsyncClient, Event, EventLoop, MqttOptions};
use rumqttc::{Outgoing, Transport};
use tokio::sync::oneshot;

use super::{Link, Scrub, ended, metadata, names, retry};
use crate::config::broker::mqtt::MqttConfig;
use crate::delivery::{Attempt, Destination, Job, Outcome};

type Ack = oneshot::Sender<Result<(), String>>;

/// The attempts waiting for their publish to be sent (in order), and
/// those sent, by packet id.
#[derive(Default)]
struct Waiting {
    queued: VecDeque<Ack>,
    sent: HashMap<u16, Ack>,
}

/// One connection: its client, the attempts waiting on it, and whether
/// it broke.
struct Open {
    client: AsyncClient,
    waiting: Arc<Mutex<Waiting>>,
    /// Held from queuing an attempt's ack to handing its publish to the
    /// event loop, so both queues keep one order.
    order: tokio::sync::Mutex<()>,
    closed: Arc<AtomicBool>,
}

pub struct MqttDestination {
    config: MqttConfig,
    timeout: Duration,
    scrub: Scrub,
    link: Link<Arc<Open>>,
}

impl Destination for MqttDestination {
    fn deliver<'a>(&'a self, job: &'a Job) -> Pin<Box<dyn Future<Output = Attempt> + Send + 'a>> {
        Box::pin(MqttDestination::deliver(self, job))
    }
}

impl MqttDestination {
    /// `timeout` bounds connecting and each publish until its ack.
    pub fn new(config: MqttConfig, timeout: Duration) -> Self {
        MqttDestination {
            scrub: Scrub::new(&config.url),
            config,
            timeout,
            link: Link::default(),
        }
    }

    fn options(&self) -> Result<MqttOptions, String> {
        let url = url::Url::parse(self.config.url.expose())
            .map_err(|e| self.scrub.text("the MQTT URL", e))?;
        let tls = url.scheme() == "mqtts";
        let host = url.host_str().unwrap_or_default().to_owned();
        let port = url.port().unwrap_or(if tls { 8883 } else { 1883 });
        let client_id = format!("hookbox-{:016x}", fastrand::u64(..));
        let mut options = MqttOptions::new(client_id, host, port);
        options
            .set_clean_start(true)
            .set_keep_alive(Duration::from_secs(30))
            .set_connection_timeout(self.timeout.as_secs().max(1));
        if !url.username().is_empty() || url.password().is_some() {
            let decode = |s: &str| super::percent_decode(s).unwrap_or_else(|_| s.to_owned());
            options.set_credentials(
                decode(url.username()),
                decode(url.password().unwrap_or_default()),
            );
        }
        if tls {
            options.set_transport(Transport::tls_with_default_config());
        }
        Ok(options)
    }

    async fn open(&self) -> Result<Arc<Open>, String> {
        let (client, mut events) = AsyncClient::new(self.options()?, 64);
        // Until the CONNACK: refused credentials or a broker that is down
        // fail this attempt with the reason.
        let connected = tokio::time::timeout(self.timeout, async {
            loop {
                match events.poll().await {
                    Ok(Event::Incoming(Packet::ConnAck(ack))) => {
                        return match ack.code {
                            ConnectReturnCode::Success => Ok(()),
                            code => {
                                Err(format!("the MQTT broker refused the connection: {code:?}"))
                            }
                        };
                    }
                    Ok(_) => {}
                    Err(e) => return Err(self.scrub.text("connecting to the MQTT broker", e)),
                }
            }
        })
        .await
        .map_err(|_| {
            format!(
                "connecting to the MQTT broker timed out after {:?}",
                self.timeout
            )
        })?;
        connected?;
        let open = Arc::new(Open {
            client,
            waiting: Arc::default(),
            order: tokio::sync::Mutex::new(()),
            closed: Arc::default(),
        });
        tokio::spawn(drive(
            events,
            open.waiting.clone(),
            open.closed.clone(),
            self.scrub.clone(),
        ));
        Ok(open)
    }

    pub async fn deliver(&self, job: &Job) -> Attempt {
        let started = Instant::now();
        let topic = match self.config.topic.render(&names(job)) {
            Ok(topic) => topic,
            Err(why) => return ended(started, Outcome::Dead, Some(why)),
        };
        let (n, open) = match self.link.get(self.open()).await {
            Ok(link) => link,
            Err(e) => return retry(started, e),
        };
        if open.closed.load(Ordering::Acquire) {
            self.link.broken(n).await;
            return retry(
                started,
                "the MQTT connection was lost; reconnecting".to_owned(),
            );
        }
        let qos = if self.config.qos == 2 {
            QoS::ExactlyOnce
        } else {
            QoS::AtLeastOnce
        };
        let (ack, acked) = oneshot::channel();
        let queued = {
            let _order = open.order.lock().await;
            lock(&open.waiting).queued.push_back(ack);
            let sent = open
                .client
                .publish_bytes_with_properties(topic, qos, false, job.body.clone(), properties(job))
                .await;
            if sent.is_err() {
                lock(&open.waiting).queued.pop_back();
            }
            sent
        };
        if let Err(e) = queued {
            self.link.broken(n).await;
            return retry(started, self.scrub.text("queuing the MQTT publish", e));
        }
        match tokio::time::timeout(self.timeout, acked).await {
            Ok(Ok(Ok(()))) => ended(started, Outcome::Delivered, None),
            Ok(Ok(Err(why))) => retry(started, why),
            Ok(Err(_)) => {
                self.link.broken(n).await;
                retry(
                    started,
                    "the MQTT connection was lost before the ack (outcome unknown)".to_owned(),
                )
            }
            Err(_) => retry(
                started,
                format!(
                    "no {} within {:?} (outcome unknown)",
                    if self.config.qos == 2 {
                        "PUBCOMP"
                    } else {
                        "PUBACK"
                    },
                    self.timeout
                ),
            ),
        }
    }
}

fn lock(waiting: &Mutex<Waiting>) -> std::sync::MutexGuard<'_, Waiting> {
    // A panic while holding it leaves plain queues, still consistent.
    waiting
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs a connection's event loop: pairs packet ids with attempts and
/// acks with them, until the connection breaks, which fails every
/// attempt still waiting.
async fn drive(
    mut events: EventLoop,
    waiting: Arc<Mutex<Waiting>>,
    closed: Arc<AtomicBool>,
    scrub: Scrub,
) {
    let why = loop {
        let event = match events.poll().await {
            Ok(event) => event,
            Err(e) => break scrub.text("the MQTT connection broke", e),
        };
        let mut waiting = lock(&waiting);
        let (pkid, result) = match event {
            Event::Outgoing(Outgoing::Publish(pkid)) => {
                if let Some(ack) = waiting.queued.pop_front() {
                    waiting.sent.insert(pkid, ack);
                }
                continue;
            }
            Event::Incoming(Packet::PubAck(ack)) => (
                ack.pkid,
                match ack.reason {
                    PubAckReason::Success | PubAckReason::NoMatchingSubscribers => Ok(()),
                    reason => Err(format!(
                        "the MQTT broker refused the message (PUBACK {reason:?})"
                    )),
                },
            ),
            Event::Incoming(Packet::PubRec(rec)) => match rec.reason {
                // PUBREL follows; PUBCOMP settles it.
                PubRecReason::Success | PubRecReason::NoMatchingSubscribers => continue,
                reason => (
                    rec.pkid,
                    Err(format!(
                        "the MQTT broker refused the message (PUBREC {reason:?})"
                    )),
                ),
            },
            Event::Incoming(Packet::PubComp(comp)) => (comp.pkid, Ok(())),
            Event::Incoming(Packet::Disconnect(d)) => {
                break format!("the MQTT broker disconnected: {:?}", d.reason_code);
            }
            _ => continue,
        };
        if let Some(ack) = waiting.sent.remove(&pkid) {
            let _ = ack.send(result);
        }
    };
    closed.store(true, Ordering::Release);
    let waiting = std::mem::take(&mut *lock(&waiting));
    for ack in waiting.queued.into_iter().chain(waiting.sent.into_values()) {
        let _ = ack.send(Err(why.clone()));
    }
}

/// The metadata as user properties, and the content type.
fn properties(job: &Job) -> PublishProperties {
    PublishProperties {
        user_properties: metadata(job)
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect(),
        content_type: job.content_type.clone(),
        ..PublishProperties::default()
    }
}
