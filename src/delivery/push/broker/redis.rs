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

use std::pin::Pin;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use super::{Link, Scrub, ended, message_id, metadata, names, retry};
use crate::config::broker::redis::RedisConfig;
use crate::delivery::{Attempt, Destination, Job, Outcome};

/// KEYS: the stream, the delivery's marker. ARGV: how long the marker
/// lives (s), `MAXLEN` (or empty), then the fields and values.
const ADD_ONCE: &str = r"
local added = redis.call('GET', KEYS[2])
if added then return added end
local id
if ARGV[2] ~= '' then
  id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', unpack(ARGV, 3))
else
  id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 3))
end
redis.call('SET', KEYS[2], id, 'EX', ARGV[1])
return id
";

/// How long an added delivery is remembered: longer than any retry after
/// an unknown outcome waits (`backoff_cap` is at most a day). A replay
/// within it finds the entry there and adds none.
pub const REMEMBER: Duration = Duration::from_secs(2 * 24 * 3600);

pub struct RedisDestination {
    config: RedisConfig,
    timeout: Duration,
    scrub: Scrub,
    script: redis::Script,
    link: Link<MultiplexedConnection>,
}

impl Destination for RedisDestination {
    fn deliver<'a>(&'a self, job: &'a Job) -> Pin<Box<dyn Future<Output = Attempt> + Send + 'a>> {
        Box::pin(RedisDestination::deliver(self, job))
    }
}

impl RedisDestination {
    /// `timeout` bounds connecting and each add until its reply.
    pub fn new(config: RedisConfig, timeout: Duration) -> Self {
        RedisDestination {
            scrub: Scrub::new(&config.url),
            config,
            timeout,
            script: redis::Script::new(ADD_ONCE),
            link: Link::default(),
        }
    }

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

    pub async fn deliver(&self, job: &Job) -> Attempt {
        let started = Instant::now();
        let stream = match self.config.stream.render(&names(job)) {
            Ok(stream) => stream,
            Err(why) => return ended(started, Outcome::Dead, Some(why)),
        };
        let (n, mut connection) = match self.link.get(self.open()).await {
            Ok(link) => link,
            Err(e) => return retry(started, e),
        };
        let mut call = self.script.key(&stream);
        call.key(format!("hookbox:sent:{}", message_id(job)))
            .arg(REMEMBER.as_secs())
            .arg(
                self.config
                    .maxlen
                    .map(|n| n.to_string())
                    .unwrap_or_default(),
            );
        for (name, value) in metadata(job) {
            call.arg(name).arg(value);
        }
        if let Some(content_type) = &job.content_type {
            call.arg("content-type").arg(content_type);
        }
        call.arg("body").arg(job.body.as_ref());
        let added: redis::RedisResult<String> = call.invoke_async(&mut connection).await;
        match added {
            Ok(_entry) => ended(started, Outcome::Delivered, None),
            Err(e) => {
                if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() {
                    self.link.broken(n).await;
                }
                retry(started, self.scrub.text("adding to the Redis stream", e))
            }
        }
    }
}
