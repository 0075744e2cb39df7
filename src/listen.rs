//! `hookbox listen`: a consumer of the pull API that forwards each event to
//! a local URL, for a laptop or a host that cannot be reached.
//!
//! It long-polls `POST {url}/pull/{source}/{destination}`, POSTs each event
//! to `--forward-to` with its original body, content type and kept
//! headers, and acks it on a 2xx (all of a take's together, one commit on
//! the server) or nacks it otherwise (the server then retries it with the
//! destination's backoff). Events come in per-key
//! order, one of a key at a time, so forwarding them one by one keeps that
//! order locally. What it has not acked comes back after a restart, when
//! its lease runs out: nothing sent while the laptop was closed is lost.
//!
//! When the server cannot be reached it tries again with a backoff from
//! one second to a minute (with `--once`, it exits 1 instead). On Ctrl-C (or SIGTERM) it gives back the leases
//! of events it has not forwarded yet (`release`: no attempt counted, due
//! again at once) and exits 0.

use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, bail};
use base64::Engine as _;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::config::Secret;

/// What `hookbox listen` was asked to do.
#[derive(Debug)]
pub struct Listen {
    /// The server's base URL (`https://hooks.example.com`).
    pub url: reqwest::Url,
    pub source: String,
    pub destination: String,
    pub token: Secret,
    pub forward_to: reqwest::Url,
    /// Drain what is due, then exit.
    pub once: bool,
    /// Events per take.
    pub max: usize,
    /// How long one take waits when nothing is due.
    pub wait: Duration,
    /// PEM file of a CA to trust besides the system's roots.
    pub ca: Option<std::path::PathBuf>,
}

/// Longest pause between two tries when the server cannot be reached.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// How long forwarding one event to the local URL may take.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs until `stop` fires (or, with `once`, nothing is due); every line
/// it prints goes to stdout, problems to stderr.
pub async fn run(listen: Listen, stop: CancellationToken) -> anyhow::Result<()> {
    let ca = match &listen.ca {
        Some(path) => {
            let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            Some(
                reqwest::Certificate::from_pem(&pem)
                    .with_context(|| format!("{} holds no PEM certificate", path.display()))?,
            )
        }
        None => None,
    };
    let server = crate::outbound::build(|| {
        let b = crate::outbound::builder().timeout(listen.wait + Duration::from_secs(30));
        match &ca {
            Some(ca) => b.add_root_certificate(ca.clone()),
            None => b,
        }
    })
    .context("building the HTTP client")?;
    let local = crate::outbound::builder()
        .timeout(FORWARD_TIMEOUT)
        .build()
        .context("building the HTTP client")?;
    let lane = Lane::new(&listen, server)?;
    eprintln!(
        "listening to {} (source {}, destination {}), forwarding to {}",
        listen.url, listen.source, listen.destination, listen.forward_to
    );
    let mut backoff = Duration::from_secs(1);
    loop {
        let wait = if listen.once {
            Duration::ZERO
        } else {
            listen.wait
        };
        let taken = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            taken = lane.take(listen.max, wait) => taken,
        };
        let events = match taken {
            Ok(events) => {
                backoff = Duration::from_secs(1);
                events
            }
            Err(Failure::Fatal(e)) => return Err(e),
            // A cron job's run: fail now and let the next run try.
            Err(Failure::Retry(e)) if listen.once => return Err(e.context("cannot take events")),
            Err(Failure::Retry(e)) => {
                eprintln!(
                    "cannot take events ({e:#}); trying again in {}s",
                    backoff.as_secs()
                );
                tokio::select! {
                    () = stop.cancelled() => return Ok(()),
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        if events.is_empty() && listen.once {
            return Ok(());
        }
        // Forwarded one by one, in the order taken (one event of a key per
        // take, so a key's order holds); acked together once the batch is
        // through: one commit on the server for the batch, not one each.
        let mut delivered = Vec::new();
        let mut left = events.into_iter();
        while let Some(event) = left.next() {
            if stop.is_cancelled() {
                let leases: Vec<Value> = std::iter::once(event)
                    .chain(left)
                    .map(|e| e["lease"].clone())
                    .collect();
                lane.release(leases).await;
                break;
            }
            if let Some(lease) = lane.forward(&local, &listen.forward_to, &event).await {
                delivered.push(lease);
            }
        }
        lane.ack(delivered).await;
        if stop.is_cancelled() {
            return Ok(());
        }
    }
}

/// Why a take failed.
enum Failure {
    /// The server is unreachable or busy: try again later.
    Retry(anyhow::Error),
    /// It will not work by trying again (wrong token, unknown destination).
    Fatal(anyhow::Error),
}

/// The pull destination and how to reach it.
struct Lane {
    client: reqwest::Client,
    source: String,
    base: String,
    token: Secret,
}

impl Lane {
    fn new(listen: &Listen, client: reqwest::Client) -> anyhow::Result<Lane> {
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

    async fn take(&self, max: usize, wait: Duration) -> Result<Vec<Value>, Failure> {
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
        match body["events"].as_array() {
            Some(events) => Ok(events.clone()),
            None => Err(Failure::Fatal(anyhow::anyhow!(
                "the server's answer has no events list: is --url a hookbox?"
            ))),
        }
    }

    /// POSTs `event` to `to` and prints one line; returns its lease to
    /// ack when it went through, nacks it at once otherwise.
    async fn forward(
        &self,
        local: &reqwest::Client,
        to: &reqwest::Url,
        event: &Value,
    ) -> Option<Value> {
        let started = Instant::now();
        let outcome = match request(local, to, &self.source, event) {
            Ok(request) => request.send().await.map_err(|e| format!("{e}")),
            Err(e) => Err(format!("{e:#}")),
        };
        let took = started.elapsed().as_millis();
        let shown = match &outcome {
            Ok(r) => r.status().as_u16().to_string(),
            Err(e) => format!("failed ({e})"),
        };
        println!(
            "{} {} {} {} {} {} {took}ms",
            humantime::format_rfc3339_seconds(SystemTime::now()),
            self.source,
            text(&event["event_type"]),
            text(&event["delivery_id"]),
            event["id"],
            shown,
        );
        let lease = &event["lease"];
        let error = match &outcome {
            Ok(r) if r.status().is_success() => return Some(lease.clone()),
            Ok(r) => format!("the local endpoint answered {}", r.status()),
            Err(e) => e.clone(),
        };
        let body = json!({ "leases": [lease], "error": error });
        if let Err(e) = self.post("nack", body).await {
            eprintln!(
                "cannot nack {} ({e:#}); it comes back when its lease runs out",
                event["id"]
            );
        }
        None
    }

    /// Acks what was delivered, in one request.
    async fn ack(&self, leases: Vec<Value>) {
        if leases.is_empty() {
            return;
        }
        let n = leases.len();
        if let Err(e) = self.post("ack", json!({ "leases": leases })).await {
            eprintln!("cannot ack {n} events ({e:#}); they come back when their leases run out");
        }
    }

    /// Gives unforwarded leases back, so they are due again at once.
    async fn release(&self, leases: Vec<Value>) {
        if leases.is_empty() {
            return;
        }
        let n = leases.len();
        match self.post("release", json!({ "leases": leases })).await {
            Ok(()) => eprintln!("gave back {n} events not yet forwarded"),
            Err(e) => eprintln!(
                "cannot give back {n} events ({e:#}); they come back when their leases run out"
            ),
        }
    }

    async fn post(&self, verb: &str, body: Value) -> anyhow::Result<()> {
        let r = self
            .client
            .post(format!("{}/{verb}", self.base))
            .bearer_auth(self.token.expose())
            .json(&body)
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("the server answered {}", r.status());
        }
        Ok(())
    }
}

/// The local request for `event` of `source`: its body, content type and
/// kept headers, and hookbox's own `X-Hookbox-*`.
fn request(
    client: &reqwest::Client,
    to: &reqwest::Url,
    source: &str,
    event: &Value,
) -> anyhow::Result<reqwest::RequestBuilder> {
    let body = base64::engine::general_purpose::STANDARD
        .decode(event["body_base64"].as_str().unwrap_or_default())
        .context("the event's body is not base64")?;
    let mut request = client.post(to.clone()).body(body);
    if let Some(ct) = event["content_type"].as_str() {
        request = request.header(reqwest::header::CONTENT_TYPE, ct);
    }
    if let Some(headers) = event["headers"].as_object() {
        for (name, value) in headers {
            if let Some(value) = value.as_str() {
                request = request.header(name.as_str(), value);
            }
        }
    }
    // As a url destination sends them.
    request = request
        .header("x-hookbox-source", source)
        .header("x-hookbox-event-id", event["id"].to_string())
        .header("x-hookbox-delivery-id", text(&event["delivery_id"]))
        .header("x-hookbox-attempt", event["attempt"].to_string());
    if let Some(t) = event["event_type"].as_str() {
        request = request.header("x-hookbox-event-type", t);
    }
    Ok(request)
}

/// A JSON string as text, anything else (null) as `-`.
fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("-")
}
