//! `redis`: an entry added to a Redis stream (`XADD`), exactly once.
//!
//! The add is a server-side script (`ADD_ONCE`) that first looks for
//! the delivery's [`message_id`] under `hookbox:sent:<id>`: when present,
//! the entry was added by an earlier attempt whose reply was lost, and its
//! entry id is answered again; when absent, the entry is added and the id
//! remembered (for [`REMEMBER`]) in the same script, which Redis runs
//! atomically. So a retry after an unknown outcome never adds a second
//! entry. The entry's fields are the metadata, `content-type` when the
//! event has one, and `body` (the exact bytes). With `maxlen`, the add
//! trims the stream to about that many entries (`MAXLEN ~`).
//!
//! Delivered means Redis ran the script and answered: with
//! `appendonly yes` and `appendfsync always` on the server, the entry is
//! on its disk (Redis' own durability settings decide, not hookbox).
//!
//! The adds waiting for Redis go in one script call ([`make_calls`]): the
//! script runs `ADD_ONCE`'s steps for each, so each keeps its own marker,
//! outcome and reason, and the call costs Redis one fsync. With a call
//! per add, Redis, which reads at most 16 KiB of a connection per turn of
//! its event loop and fsyncs after every turn that wrote, took as many
//! adds per fsync as fit in 16 KiB (about nine of the bench's events),
//! and a Redis drain made 0.7 of a url destination's rate (benchmark
//! page, 2026-12-07). One call is in flight at a time; what arrives
//! meanwhile goes in the next.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use redis::Value;
use redis::aio::MultiplexedConnection;
use tokio::sync::{mpsc, oneshot};

use super::{Link, Scrub, ended, message_id, metadata, names, retry};
use crate::config::broker::redis::RedisConfig;
use crate::delivery::{Attempt, Destination, Job, Outcome};

/// KEYS: each add's stream and marker, in turn. ARGV: how long a marker
/// lives (s), `MAXLEN` (or empty), then for each add the number of its
/// field and value arguments and those arguments. Answers, for each add,
/// its entry id, or a one-element array with its error.
const ADD_ONCE: &str = r"
local function add(stream, marker, first, last)
  local added = redis.call('GET', marker)
  if added then return added end
  if ARGV[2] ~= '' then
    added = redis.call('XADD', stream, 'MAXLEN', '~', ARGV[2], '*', unpack(ARGV, first, last))
  else
    added = redis.call('XADD', stream, '*', unpack(ARGV, first, last))
  end
  redis.call('SET', marker, added, 'EX', ARGV[1])
  return added
end
local out, at = {}, 3
for i = 1, #KEYS, 2 do
  local n = tonumber(ARGV[at])
  local ok, added = pcall(add, KEYS[i], KEYS[i + 1], at + 1, at + n)
  if ok then
    out[#out + 1] = added
  else
    out[#out + 1] = { type(added) == 'table' and added.err or tostring(added) }
  end
  at = at + n + 1
end
return out
";

/// How long an added delivery is remembered: longer than any retry after
/// an unknown outcome waits (`backoff_cap` is at most a day). A replay
/// within it finds the entry there and adds none.
pub const REMEMBER: Duration = Duration::from_secs(2 * 24 * 3600);

/// At most this many adds go in one call...
const CALL_ADDS: usize = 256;
/// ...and no more once their arguments reach this many bytes (one larger
/// body goes alone).
const CALL_BYTES: usize = 1 << 20;

pub struct RedisDestination {
    shared: Arc<Shared>,
    /// Where adds queue for [`make_calls`], started by the first attempt (a
    /// destination is built before the runtime runs). Unbounded: no more
    /// adds wait in it than the destination has attempts in flight.
    adds: OnceLock<mpsc::UnboundedSender<Add>>,
}

/// What the destination and its [`make_calls`] task share.
struct Shared {
    config: RedisConfig,
    timeout: Duration,
    scrub: Scrub,
    script: redis::Script,
    link: Link<MultiplexedConnection>,
}

/// One delivery's add: its stream, marker and fields, and where its
/// outcome goes (`Err`: why it failed).
struct Add {
    stream: String,
    marker: String,
    fields: Vec<Bytes>,
    done: oneshot::Sender<Result<(), String>>,
}

impl Destination for RedisDestination {
    fn deliver<'a>(&'a self, job: &'a Job) -> Pin<Box<dyn Future<Output = Attempt> + Send + 'a>> {
        Box::pin(RedisDestination::deliver(self, job))
    }
}

impl RedisDestination {
    /// `timeout` bounds connecting and each call until its reply.
    pub fn new(config: RedisConfig, timeout: Duration) -> Self {
        RedisDestination {
            shared: Arc::new(Shared {
                scrub: Scrub::new(&config.url),
                config,
                timeout,
                script: redis::Script::new(ADD_ONCE),
                link: Link::default(),
            }),
            adds: OnceLock::new(),
        }
    }

    pub async fn deliver(&self, job: &Job) -> Attempt {
        let started = Instant::now();
        let stream = match self.shared.config.stream.render(&names(job)) {
            Ok(stream) => stream,
            Err(why) => return ended(started, Outcome::Dead, Some(why)),
        };
        let (done, outcome) = oneshot::channel();
        let add = Add {
            stream,
            marker: format!("hookbox:sent:{}", message_id(job)),
            fields: fields(job),
            done,
        };
        let adds = self.adds.get_or_init(|| {
            let (adds, queued) = mpsc::unbounded_channel();
            tokio::spawn(make_calls(Arc::clone(&self.shared), queued));
            adds
        });
        if adds.send(add).is_err() {
            return retry(started, "the Redis batches stopped".to_owned());
        }
        match outcome.await {
            Ok(Ok(())) => ended(started, Outcome::Delivered, None),
            Ok(Err(why)) => retry(started, why),
            Err(_) => retry(started, "the Redis batches stopped".to_owned()),
        }
    }
}

/// The metadata, `content-type` when the event has one, and `body`, as
/// the entry's field and value arguments.
fn fields(job: &Job) -> Vec<Bytes> {
    let mut fields = Vec::with_capacity(14);
    for (name, value) in metadata(job) {
        fields.push(Bytes::from_static(name.as_bytes()));
        fields.push(Bytes::from(value));
    }
    if let Some(content_type) = &job.content_type {
        fields.push(Bytes::from_static(b"content-type"));
        fields.push(Bytes::copy_from_slice(content_type.as_bytes()));
    }
    fields.push(Bytes::from_static(b"body"));
    fields.push(job.body.clone());
    fields
}

/// The task that makes the calls, one at a time: each takes what queued
/// while the one before was in flight. (Two at a time split the same
/// adds into smaller calls, more fsyncs: a Redis drain made 10.7k/s
/// against 12.7k/s.)
async fn make_calls(shared: Arc<Shared>, mut queued: mpsc::UnboundedReceiver<Add>) {
    let mut adds = Vec::with_capacity(CALL_ADDS);
    while queued.recv_many(&mut adds, CALL_ADDS).await > 0 {
        while !adds.is_empty() {
            let mut bytes = 0;
            let take = adds
                .iter()
                .take_while(|add| {
                    let fits = bytes < CALL_BYTES;
                    bytes += add.fields.iter().map(Bytes::len).sum::<usize>();
                    fits
                })
                .count();
            let call: Vec<Add> = adds.drain(..take).collect();
            shared.add_all(call).await;
        }
    }
}

impl Shared {
    async fn open(&self) -> Result<MultiplexedConnection, String> {
        let client = redis::Client::open(self.config.url.expose())
            .map_err(|e| self.scrub.text("the Redis URL", e))?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| self.scrub.text("connecting to Redis", e))
    }

    /// One script call for `adds`; each learns its outcome.
    async fn add_all(&self, adds: Vec<Add>) {
        let (n, mut connection) = match self.link.get(self.open()).await {
            Ok(link) => link,
            Err(why) => return answer_all(adds, &why),
        };
        let mut call = self.script.prepare_invoke();
        call.arg(REMEMBER.as_secs()).arg(
            self.config
                .maxlen
                .map(|n| n.to_string())
                .unwrap_or_default(),
        );
        for add in &adds {
            call.key(&add.stream).key(&add.marker).arg(add.fields.len());
            for field in &add.fields {
                call.arg(field.as_ref());
            }
        }
        let replies: redis::RedisResult<Vec<Value>> = call.invoke_async(&mut connection).await;
        match replies {
            Ok(replies) if replies.len() == adds.len() => {
                for (add, reply) in adds.into_iter().zip(replies) {
                    let outcome = match reply {
                        Value::Array(error) => Err(self.scrub.text(
                            "adding to the Redis stream",
                            error
                                .into_iter()
                                .next()
                                .and_then(|e| redis::from_redis_value::<String>(e).ok())
                                .unwrap_or_default(),
                        )),
                        _ => Ok(()),
                    };
                    let _ = add.done.send(outcome);
                }
            }
            Ok(replies) => {
                let why = format!(
                    "adding to the Redis stream: {} replies to {} adds",
                    replies.len(),
                    adds.len()
                );
                answer_all(adds, &why);
            }
            Err(e) => {
                if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() {
                    self.link.broken(n).await;
                }
                answer_all(adds, &self.scrub.text("adding to the Redis stream", e));
            }
        }
    }
}

/// Every add in `adds` failed for `why`.
fn answer_all(adds: Vec<Add>, why: &str) {
    for add in adds {
        let _ = add.done.send(Err(why.to_owned()));
    }
}
