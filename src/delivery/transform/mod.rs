//! `transform`: a destination's jq program, run over each event at
//! dispatch to make what is sent.
//!
//! Programs are checked when the config loads (`crate::config::transform`)
//! and run in transform processes ([`pool`], [`child`]): a jq evaluator
//! overflows its stack on runaway recursion (`def f: [f]; f`), and a
//! stack overflow aborts the process it happens in. In a child of its own
//! that ends one delivery (`dead`, with the reason), never hookbox. What
//! a run gives ([`Applied`]):
//!
//! * one output: what is sent, JSON, or the text of a string output;
//! * no output: nothing is sent, and the delivery is `skipped`;
//! * an error, several outputs, a run past the time bound, a crash: the
//!   delivery is `dead`, with the reason, no attempt made.
//!
//! Used by `crate::delivery::push` at each attempt, or just ahead of it
//! ([`Transform::start`]), so a fixed program applies to retries and
//! replays; and by `hookbox try`, which must send exactly what a delivery
//! would.

pub mod child;
pub mod eval;
pub mod frame;
pub mod pool;

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::oneshot;

use self::eval::Reply;
use self::pool::Pool;
use super::Job;
use crate::config::DeliverConfig;
use crate::support::excerpt;

/// The content type of a JSON output.
pub const JSON: &str = "application/json";
/// The content type of a string output.
pub const TEXT: &str = "text/plain; charset=utf-8";

/// What a transform made of one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Send this body with this content type.
    Send {
        body: Bytes,
        content_type: &'static str,
    },
    /// No output: send nothing; the delivery is `skipped`.
    Skip,
    /// The delivery is `dead` for this reason.
    Fail(String),
    /// No transform process could run it: a failed attempt, retried.
    Retry(String),
}

/// One destination's program, in the pool that runs it.
#[derive(Clone)]
pub struct Transform {
    pool: Arc<Pool>,
    program: u32,
}

impl Transform {
    /// Runs the program over `job`'s event.
    pub async fn apply(&self, job: &Job) -> Applied {
        let event = event(&Metadata::of(job));
        applied(self.pool.run(self.program, &event, &job.body).await)
    }

    /// Starts the program over several events at once, each `($event,
    /// body)`, ahead of their attempts: they reach a transform process as
    /// one batch, which costs both sides far less per event than one
    /// request at a time.
    pub fn start<'a>(
        &self,
        events: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Vec<Pending> {
        let requests = events
            .into_iter()
            .map(|(event, body)| (self.program, event, body));
        self.pool
            .submit(requests)
            .into_iter()
            .map(Pending)
            .collect()
    }
}

/// A run [`Transform::start`]ed: what it made, once it is done.
pub struct Pending(oneshot::Receiver<Reply>);

impl Pending {
    pub async fn applied(self) -> Applied {
        applied(pool::answered(Some(self.0)).await)
    }
}

fn applied(reply: Reply) -> Applied {
    match reply {
        Reply::Json(body) => Applied::Send {
            body: body.into(),
            content_type: JSON,
        },
        Reply::Text(body) => Applied::Send {
            body: body.into(),
            content_type: TEXT,
        },
        Reply::Nothing => Applied::Skip,
        Reply::Failed(why) => Applied::Fail(excerpt::bytes(why.as_bytes())),
        Reply::Unavailable(why) => Applied::Retry(excerpt::bytes(why.as_bytes())),
    }
}

/// The transforms of `destinations`, in order (`None` for one without),
/// all run by one pool; `None` when none has a transform.
pub fn for_destinations<'a>(
    destinations: impl IntoIterator<Item = &'a DeliverConfig>,
) -> anyhow::Result<Vec<Option<Transform>>> {
    let destinations: Vec<&DeliverConfig> = destinations.into_iter().collect();
    let programs: Vec<Arc<str>> = destinations
        .iter()
        .filter_map(|d| d.transform.clone())
        .collect();
    if programs.is_empty() {
        return Ok(vec![None; destinations.len()]);
    }
    let pool = Arc::new(Pool::new(&programs)?);
    let mut next = 0u32;
    Ok(destinations
        .iter()
        .map(|d| {
            d.transform.as_ref().map(|_| {
                next += 1;
                Transform {
                    pool: pool.clone(),
                    program: next - 1,
                }
            })
        })
        .collect())
}

/// What `$event` says of an event: its stored metadata, and where it
/// is going.
pub struct Metadata<'a> {
    pub id: i64,
    pub source: &'a str,
    pub destination: &'a str,
    pub delivery_id: &'a str,
    pub event_type: Option<&'a str>,
    /// Unix ms.
    pub received_at: i64,
    pub headers: &'a serde_json::Map<String, serde_json::Value>,
}

impl<'a> Metadata<'a> {
    pub fn of(job: &'a Job) -> Self {
        Metadata {
            id: job.event_id,
            source: &job.source,
            destination: &job.destination,
            delivery_id: &job.delivery_id,
            event_type: job.event_type.as_deref(),
            received_at: job.received_at,
            headers: &job.headers,
        }
    }
}

/// `$event`, as the JSON the transform process reads.
pub fn event(about: &Metadata<'_>) -> Vec<u8> {
    let received_at = std::time::UNIX_EPOCH
        + std::time::Duration::from_millis(u64::try_from(about.received_at).unwrap_or(0));
    let event = Event {
        delivery_id: about.delivery_id,
        destination: about.destination,
        event_type: about.event_type,
        headers: about.headers,
        id: about.id,
        received_at: humantime::format_rfc3339_seconds(received_at).to_string(),
        source: about.source,
    };
    // A struct of plain fields and a map of strings cannot fail to encode.
    serde_json::to_vec(&event).unwrap_or_default()
}

/// `$event`'s fields, in the order `$event | keys_unsorted` has always
/// given (alphabetical, as serde_json's maps keep them).
#[derive(serde::Serialize)]
struct Event<'a> {
    delivery_id: &'a str,
    destination: &'a str,
    event_type: Option<&'a str>,
    headers: &'a serde_json::Map<String, serde_json::Value>,
    id: i64,
    received_at: String,
    source: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn event_is_the_metadata_as_one_json_object_in_key_order() {
        let mut headers = serde_json::Map::new();
        headers.insert("x-github-event".into(), json!("push"));
        let job = Job {
            event_id: 7,
            source: "gh".into(),
            destination: "discord".into(),
            delivery_id: "d-1\"".into(),
            event_type: None,
            received_at: 1_700_000_000_123,
            content_type: None,
            headers,
            body: Bytes::new(),
            attempt: 1,
        };
        let expected = json!({
            "id": 7,
            "source": "gh",
            "destination": "discord",
            "event_type": null,
            "delivery_id": "d-1\"",
            "received_at": "2023-11-14T22:13:20Z",
            "headers": {"x-github-event": "push"},
        });
        assert_eq!(
            String::from_utf8(event(&Metadata::of(&job))).unwrap(),
            expected.to_string()
        );
    }
}
