//! The broker destinations: [`nats`] (JetStream), [`redis`] (Streams),
//! [`amqp`] (RabbitMQ) and [`mqtt`] (MQTT 5), one file each implementing
//! `crate::delivery::Destination`, and what they share.
//!
//! Each keeps one connection per destination ([`Link`]): opened by the
//! first attempt, and again by the first attempt after it broke, so a
//! broker that is down costs each delivery one failed attempt and the
//! destination's backoff (and breaker) paces the reconnecting. An attempt
//! is `Delivered` only once the broker confirmed the message durable
//! (JetStream's PubAck, Redis' reply to the script, RabbitMQ's publisher
//! confirm, MQTT's PUBACK or PUBCOMP); anything else is a retry, so after
//! an unknown outcome the message is sent again with the same
//! [`message_id`], which NATS and Redis use to keep exactly one copy.
//!
//! The message is the body with the event's [`metadata`] beside it, in
//! the broker's headers or properties. The broker URL carries credentials:
//! no error text leaves here without [`Scrub`] taking the URL and its
//! password out.

pub mod amqp;
pub mod mqtt;
pub mod nats;
pub mod redis;

use std::fmt::Display;
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};

use crate::config::broker::{BrokerUrl, Names};
use crate::delivery::{Attempt, Job, Outcome};
use crate::support::excerpt;

/// The metadata of every broker message, as `(name, value)`.
pub fn metadata(job: &Job) -> [(&'static str, String); 5] {
    [
        ("hookbox-event-id", job.event_id.to_string()),
        ("hookbox-source", job.source.clone()),
        (
            "hookbox-event-type",
            job.event_type.clone().unwrap_or_default(),
        ),
        ("hookbox-delivery-id", job.delivery_id.clone()),
        ("hookbox-received-at", received_at(job.received_at)),
    ]
}

/// Unix ms as RFC 3339 with milliseconds, UTC.
fn received_at(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(t).to_string()
}

/// The id a broker dedupes on (`Nats-Msg-Id`, the Redis script's key,
/// AMQP's `message_id`): `hbx_` and 32 hex digits of SHA-256(`source` NUL
/// `destination` NUL `delivery_id`). The same on every attempt and replay
/// of one delivery; two destinations of a source that publish into one
/// stream each keep their copy.
pub fn message_id(job: &Job) -> String {
    let mut hash = Sha256::new();
    for part in [&job.source, &job.destination, &job.delivery_id] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    format!("hbx_{}", hex::encode(&hash.finalize()[..16]))
}

/// What a name template reads of the job.
pub fn names(job: &Job) -> Names<'_> {
    Names {
        source: &job.source,
        destination: &job.destination,
        delivery_id: &job.delivery_id,
        event_type: job.event_type.as_deref(),
        body: &job.body,
    }
}

/// Takes a broker URL's secrets out of error text: the URL itself and
/// its password (as written and percent-decoded), whatever a client
/// library puts in its messages.
#[derive(Clone)]
pub struct Scrub {
    secrets: Vec<String>,
}

impl Scrub {
    pub fn new(url: &BrokerUrl) -> Scrub {
        let mut secrets = vec![url.expose().to_owned()];
        if let Ok(parsed) = url::Url::parse(url.expose())
            && let Some(password) = parsed.password()
        {
            secrets.push(password.to_owned());
            if let Ok(decoded) = percent_decode(password) {
                secrets.push(decoded);
            }
        }
        secrets.retain(|s| !s.is_empty());
        // Longest first: the URL before the password inside it.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Scrub { secrets }
    }

    /// `what: error` as an error excerpt, secrets replaced.
    pub fn text(&self, what: &str, error: impl Display) -> String {
        let mut text = format!("{what}: {error}");
        for secret in &self.secrets {
            text = text.replace(secret.as_str(), "[redacted]");
        }
        excerpt::bytes(text.as_bytes())
    }
}

pub(super) fn percent_decode(text: &str) -> Result<String, std::string::FromUtf8Error> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out)
}

/// A destination's one connection: `C` is a cheap handle to it (clients
/// here are clones of one connection). Opened on demand, dropped when an
/// attempt found it broken, so the next attempt opens a new one.
pub struct Link<C> {
    slot: tokio::sync::Mutex<Option<(u64, C)>>,
    opened: std::sync::atomic::AtomicU64,
}

impl<C: Clone> Default for Link<C> {
    fn default() -> Self {
        Link {
            slot: tokio::sync::Mutex::new(None),
            opened: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

impl<C: Clone> Link<C> {
    /// The open connection, or a new one from `open` (one attempt opens
    /// while the others of the destination wait for it). Its number is
    /// what [`Link::broken`] takes.
    pub async fn get<F>(&self, open: F) -> Result<(u64, C), String>
    where
        F: Future<Output = Result<C, String>>,
    {
        let mut slot = self.slot.lock().await;
        if let Some((n, c)) = &*slot {
            return Ok((*n, c.clone()));
        }
        let c = open.await?;
        let n = self
            .opened
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        *slot = Some((n, c.clone()));
        Ok((n, c))
    }

    /// Connection `n` failed: the next attempt opens another (unless one
    /// already replaced it).
    pub async fn broken(&self, n: u64) {
        let mut slot = self.slot.lock().await;
        if slot.as_ref().is_some_and(|(open, _)| *open == n) {
            *slot = None;
        }
    }
}

/// An attempt's end, timed from `started`.
pub fn ended(started: Instant, outcome: Outcome, error: Option<String>) -> Attempt {
    Attempt {
        outcome,
        status: None,
        duration: started.elapsed(),
        error,
    }
}

/// A failed attempt, retried after the destination's backoff.
pub fn retry(started: Instant, error: String) -> Attempt {
    ended(started, Outcome::Retry { retry_after: None }, Some(error))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_takes_out_the_url_and_its_password_in_both_spellings() {
        let url = crate::config::broker::test_url("redis://app:p%40ss%2Fw0rd@127.0.0.1:6379/0");
        let scrub = Scrub::new(&url);
        let text = scrub.text(
            "connecting",
            "failed for redis://app:p%40ss%2Fw0rd@127.0.0.1:6379/0 (p@ss/w0rd, p%40ss%2Fw0rd)",
        );
        assert_eq!(
            text,
            "connecting: failed for [redacted] ([redacted], [redacted])"
        );
    }

    #[test]
    fn the_message_id_is_per_destination_and_stable() {
        let job = |destination: &str| Job {
            event_id: 1,
            source: "github".into(),
            destination: destination.into(),
            delivery_id: "d-1".into(),
            event_type: None,
            received_at: 0,
            content_type: None,
            headers: Default::default(),
            body: Default::default(),
            attempt: 1,
        };
        assert_eq!(message_id(&job("a")), message_id(&job("a")));
        assert_ne!(message_id(&job("a")), message_id(&job("b")));
        assert!(message_id(&job("a")).starts_with("hbx_"));
        assert_eq!(message_id(&job("a")).len(), 4 + 32);
    }
}
