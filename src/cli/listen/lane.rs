//! The pull destination as `listen` speaks to it: take, ack, nack,
//! release and extend, over the server's HTTP API.
//!
//! Leases are opaque strings: only the server reads them.

use std::time::Duration;

use anyhow::bail;
use serde_json::{Value, json};

use super::Listen;
use crate::config::Secret;

/// Why a take failed.
pub(super) enum Failure {
    /// The server is unreachable or busy: try again later.
    Retry(anyhow::Error),
    /// It will not work by trying again (wrong token, unknown destination).
    Fatal(anyhow::Error),
}

/// One take's answer.
pub(super) struct Taken {
    pub events: Vec<Event>,
    /// How long each lease runs; `None` from a server that cannot extend.
    pub lease: Option<Duration>,
}

/// An event as the take answered it, with its lease.
pub(super) struct Event {
    pub lease: String,
    pub value: Value,
}

impl Event {
    /// Its id as the lines name it.
    pub fn id(&self) -> String {
        self.value["id"].to_string()
    }
}

/// How an extend went.
pub(super) enum Extended {
    /// These leases were lost already; the rest run on.
    Stale(Vec<String>),
    /// The server has no extend (a hookbox before it).
    Unsupported,
}

/// The pull destination and how to reach it.
pub(super) struct Lane {
    client: reqwest::Client,
    pub source: String,
    base: String,
    token: Secret,
}

impl Lane {
    pub fn new(listen: &Listen, client: reqwest::Client) -> anyhow::Result<Lane> {
        let mut base = listen.url.clone();
        base.path_segments_mut()
            .map_err(|()| anyhow::anyhow!("--url: {} cannot take a path", listen.url))?
            .pop_if_empty()
            .extend(["pull", &listen.source, &listen.destination]);
        Ok(Lane {
            client,
            source: listen.source.clone(),
            base: base.to_string(),
            token: listen.token.clone(),
        })
    }

    pub async fn take(&self, max: usize, wait: Duration) -> Result<Taken, Failure> {
        let url = format!("{}?max={max}&wait={}", self.base, wait.as_secs());
        let r = self
            .client
            .post(&url)
            .bearer_auth(self.token.expose())
            .send()
            .await
            .map_err(|e| Failure::Retry(e.into()))?;
        let status = r.status();
        if matches!(status.as_u16(), 401 | 404) {
            let body = r.text().await.unwrap_or_default();
            return Err(Failure::Fatal(anyhow::anyhow!(
                "the server answered {status} {}: check --source, --destination and the token",
                body.trim()
            )));
        }
        if !status.is_success() {
            return Err(Failure::Retry(anyhow::anyhow!(
                "the server answered {status}"
            )));
        }
        let body: Value = r.json().await.map_err(|e| Failure::Retry(e.into()))?;
        let not_hookbox = |what: &str| {
            Failure::Fatal(anyhow::anyhow!(
                "the server's answer has {what}: is --url a hookbox?"
            ))
        };
        let Some(events) = body["events"].as_array() else {
            return Err(not_hookbox("no events list"));
        };
        let events = events
            .iter()
            .map(|value| match value["lease"].as_str() {
                Some(lease) => Ok(Event {
                    lease: lease.to_owned(),
                    value: value.clone(),
                }),
                None => Err(not_hookbox("an event without a lease")),
            })
            .collect::<Result<_, _>>()?;
        let lease = body["lease_ms"].as_u64().map(Duration::from_millis);
        Ok(Taken { events, lease })
    }

    /// Acks or nacks (`verb`) one lease; `Ok(false)` when it was stale.
    pub async fn settle(&self, verb: &str, body: Value) -> anyhow::Result<bool> {
        let answer = self.post(verb, body, None).await?;
        Ok(answer["stale"].as_array().is_none_or(Vec::is_empty))
    }

    /// Gives leases back untried, waiting at most `within` for the answer.
    pub async fn release(&self, leases: Vec<String>, within: Duration) -> anyhow::Result<()> {
        self.post("release", json!({ "leases": leases }), Some(within))
            .await
            .map(drop)
    }

    /// Asks for a fresh lease for each of `leases`, waiting at most
    /// `within` for the answer.
    pub async fn extend(&self, leases: &[String], within: Duration) -> anyhow::Result<Extended> {
        let r = self
            .client
            .post(format!("{}/extend", self.base))
            .bearer_auth(self.token.expose())
            .json(&json!({ "leases": leases }))
            .timeout(within)
            .send()
            .await?;
        // The take worked, so the lane exists: this is the route missing.
        if matches!(r.status().as_u16(), 404 | 405) {
            return Ok(Extended::Unsupported);
        }
        if !r.status().is_success() {
            bail!("the server answered {}", r.status());
        }
        let answer: Value = r.json().await?;
        let stale = answer["stale"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect();
        Ok(Extended::Stale(stale))
    }

    async fn post(
        &self,
        verb: &str,
        body: Value,
        within: Option<Duration>,
    ) -> anyhow::Result<Value> {
        let mut request = self
            .client
            .post(format!("{}/{verb}", self.base))
            .bearer_auth(self.token.expose())
            .json(&body);
        if let Some(within) = within {
            request = request.timeout(within);
        }
        let r = request.send().await?;
        if !r.status().is_success() {
            bail!("the server answered {}", r.status());
        }
        Ok(r.json().await?)
    }
}
