//! The delivery core: what every destination kind shares, push or pull.
//!
//! One attempt has one contract: a destination is handed a [`Job`] (the
//! stored event, bodies included, so it never reads the database) and
//! answers an [`Attempt`]: delivered, retry (perhaps after the wait the
//! destination asked for), or a permanent failure, with a reason cut to
//! [`excerpt::BYTES_MAX`](crate::support::excerpt::BYTES_MAX) ([`excerpt::bytes`](crate::support::excerpt::bytes)). Around it sit the rules every kind
//! obeys, whoever makes the attempt:
//!
//! * [`settle`]: the settle rule, the one place that says what an attempt
//!   becomes (delivered, a retry, or dead after `max_attempts`), for the
//!   dispatcher's attempts, a pull consumer's nack and a lease that ran
//!   out alike, and [`backoff`], the schedule its retries follow;
//! * [`breaker`]: a destination's circuit breaker, as a state machine;
//! * [`board`]: every destination's pause state, by hand or by breaker,
//!   read by whoever hands deliveries out and by the admin API;
//! * [`replay`]: planning a replay (which deliveries go back to pending,
//!   and why not), in the same words for the admin API, the dashboard and
//!   `hookbox replay`;
//! * [`alarm`]: how the core tells a person of dead deliveries and
//!   pauses, without knowing who listens;
//! * [`transform`]: a destination's jq program, run in processes of its
//!   own so that no program can take hookbox down.
//!
//! Leases, claims and per-key order are SQL (`crate::store::deliveries`).
//! The kinds are its two children, which the core's files never import:
//! [`push`] pushes (url, command, the brokers), [`pull`] hands deliveries to consumers
//! who ask.

pub mod alarm;
pub mod backoff;
pub mod board;
pub mod breaker;
pub mod pull;
pub mod push;
pub mod replay;
pub mod settle;
pub mod transform;

use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;

/// One attempt to deliver one stored event, with everything the destination
/// needs (the row's columns, so a destination never reads the database).
#[derive(Debug, Clone)]
pub struct Job {
    /// `events.id`.
    pub event_id: i64,
    pub source: String,
    /// The destination's name (`HOOKBOX_DESTINATION` for a command).
    pub destination: String,
    pub delivery_id: String,
    pub event_type: Option<String>,
    /// When the event was stored, unix ms (`hookbox-received-at` of a
    /// broker message).
    pub received_at: i64,
    pub content_type: Option<String>,
    /// The provider headers stored with the event (`events.headers`),
    /// lowercase names to string values.
    pub headers: serde_json::Map<String, Value>,
    /// The exact bytes received.
    pub body: Bytes,
    /// Which attempt this is, 1-based.
    pub attempt: u32,
}

/// How an attempt ended, as far as the retry policy is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Delivered,
    /// Try again later; `retry_after` is what the destination asked for.
    Retry {
        retry_after: Option<Duration>,
    },
    /// A permanent failure: park the event without retrying.
    Dead,
    /// Nothing to send (a transform had no output): final, no attempt.
    Skipped,
}

/// What one attempt did, for the `attempts` table and the event's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub outcome: Outcome,
    /// The HTTP status, for url destinations that got a response.
    pub status: Option<u16>,
    pub duration: Duration,
    /// Why it failed: at most [`BYTES_MAX`](crate::support::excerpt::BYTES_MAX) bytes, never a secret or a
    /// signature.
    pub error: Option<String>,
}

/// One kind of destination that hookbox pushes to (url, command, the
/// brokers): the one contract every attempt keeps. A pull
/// destination has no implementation: its consumer makes the attempt and
/// answers through the pull API (ack, nack), which settles it by the same
/// rule ([`settle`]).
pub trait Destination: Send + Sync {
    /// One attempt to deliver `job`. Never fails and never touches the
    /// database: every problem is an [`Attempt`] to record, whose error
    /// says why in at most [`BYTES_MAX`](crate::support::excerpt::BYTES_MAX) bytes, never a secret.
    fn deliver<'a>(&'a self, job: &'a Job) -> Pin<Box<dyn Future<Output = Attempt> + Send + 'a>>;

    /// Whether an attempt still running when the shutdown grace ends is
    /// cut short and recorded (a command: its process group is killed, and
    /// what it did so far may have had effects) rather than abandoned with
    /// its lease given back (a url request, the default).
    fn interruptible(&self) -> bool {
        false
    }
}
