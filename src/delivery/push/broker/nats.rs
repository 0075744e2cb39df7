//! `nats`: JetStream publish, delivered on the stream's PubAck.
//!
//! `Nats-Msg-Id` is the delivery's [`message_id`], so a publish sent
//! again after an unknown outcome (a lost PubAck, a timeout, a broken
//! connection) is dropped by the stream's duplicate window (2 minutes by
//! default; the stream's `duplicate_window` should exceed the longest
//! outage the destination's backoff retries through), and the subject
//! holds one copy. A subject no stream captures is answered "no
//! responders": a failed attempt that says so, retried like any other
//! (a stream created later takes the next attempt).
//!
//! The client reconnects by itself once connected (async-nats retries
//! with its own backoff and sends what waited after it is back); the
//! first connection is opened by the first attempt, and by the next one
//! when it failed.

use std::pin::Pin;
use std::str::FromStr as _;
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::{self, context::PublishErrorKind};

use super::{Link, Scrub, ended, message_id, metadata, names, retry};
use crate::config::broker::nats::NatsConfig;
use crate::delivery::{Attempt, Destination, Job, Outcome};

pub struct NatsDestination {
    config: NatsConfig,
    timeout: Duration,
    scrub: Scrub,
    link: Link<jetstream::Context>,
}

impl Destination for NatsDestination {
    fn deliver<'a>(&'a self, job: &'a Job) -> Pin<Box<dyn Future<Output = Attempt> + Send + 'a>> {
        Box::pin(NatsDestination::deliver(self, job))
    }
}

impl NatsDestination {
    /// `timeout` bounds connecting and each publish until its PubAck.
    pub fn new(config: NatsConfig, timeout: Duration) -> Self {
        NatsDestination {
            scrub: Scrub::new(&config.url),
            config,
            timeout,
            link: Link::default(),
        }
    }

    async fn open(&self) -> Result<jetstream::Context, String> {
        let mut url = url::Url::parse(self.config.url.expose())
            .map_err(|e| self.scrub.text("the NATS URL", e))?;
        let tls = matches!(url.scheme(), "tls" | "nats+tls");
        // async-nats reads no credentials from the URL: `user:password@`
        // or a token as the user part are given as options.
        let decode = |s: &str| super::percent_decode(s).unwrap_or_else(|_| s.to_owned());
        let mut options = match (url.username(), url.password()) {
            ("", _) => async_nats::ConnectOptions::new(),
            (user, Some(password)) => {
                async_nats::ConnectOptions::with_user_and_password(decode(user), decode(password))
            }
            (token, None) => async_nats::ConnectOptions::with_token(decode(token)),
        };
        let _ = url.set_username("");
        let _ = url.set_password(None);
        let address = format!(
            "{}://{}:{}",
            if tls { "tls" } else { "nats" },
            url.host_str().unwrap_or_default(),
            url.port().unwrap_or(4222)
        );
        options = options
            .name("hookbox")
            .connection_timeout(self.timeout)
            .require_tls(tls);
        if let Some(credentials) = &self.config.credentials {
            options = options
                .credentials(credentials.expose())
                .map_err(|e| self.scrub.text("reading the NATS credentials", e))?;
        }
        let client = tokio::time::timeout(self.timeout, options.connect(address))
            .await
            .map_err(|_| format!("connecting to NATS timed out after {:?}", self.timeout))?
            .map_err(|e| self.scrub.text("connecting to NATS", e))?;
        let mut context = jetstream::new(client);
        context.set_timeout(self.timeout);
        Ok(context)
    }

    pub async fn deliver(&self, job: &Job) -> Attempt {
        let started = Instant::now();
        let subject = match self.config.subject.render(&names(job)) {
            Ok(subject) => subject,
            Err(why) => return ended(started, Outcome::Dead, Some(why)),
        };
        let (_, context) = match self.link.get(self.open()).await {
            Ok(link) => link,
            Err(e) => return retry(started, e),
        };
        let published = tokio::time::timeout(self.timeout, async {
            context
                .publish_with_headers(subject.clone(), headers(job), job.body.clone())
                .await?
                .await
        })
        .await;
        match published {
            Ok(Ok(_ack)) => ended(started, Outcome::Delivered, None),
            Ok(Err(e)) if e.kind() == PublishErrorKind::StreamNotFound => retry(
                started,
                format!("no JetStream stream captures the subject {subject:?} (no responders)"),
            ),
            Ok(Err(e)) => retry(started, self.scrub.text("publishing to JetStream", e)),
            Err(_) => retry(
                started,
                format!(
                    "no PubAck within {:?} (outcome unknown: the retry is deduplicated by Nats-Msg-Id)",
                    self.timeout
                ),
            ),
        }
    }
}

/// `Nats-Msg-Id`, the metadata and the content type. A value NATS cannot
/// carry (a line break) has it replaced by a space.
fn headers(job: &Job) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let mut put = |name: &'static str, value: &str| {
        let clean = value.replace(['\r', '\n'], " ");
        if let Ok(value) = async_nats::HeaderValue::from_str(&clean) {
            headers.insert(name, value);
        }
    };
    put("Nats-Msg-Id", &message_id(job));
    for (name, value) in metadata(job) {
        put(name, &value);
    }
    if let Some(content_type) = &job.content_type {
        put("content-type", content_type);
    }
    headers
}
