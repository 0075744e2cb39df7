//! `hookbox listen`: a consumer of the pull API that forwards each event to
//! a local URL, for a laptop or a host that cannot be reached.
//!
//! It long-polls `POST {url}/pull/{source}/{destination}`, POSTs each event
//! to `--forward-to` with its original body, content type and kept
//! headers ([`forward`]), and acks it as soon as its 2xx comes back, or
//! nacks it otherwise (the server then retries it with the destination's
//! backoff). Events come in per-key order, one of a key at a time, so
//! forwarding them one by one keeps that order locally. While the app
//! works, [`held`] keeps the leases of everything taken and not settled
//! alive, so a slow app does not see its events again. What it has not
//! acked comes back after a restart, when its lease runs out: nothing sent
//! while the laptop was closed is lost.
//!
//! When the server cannot be reached it tries again with a backoff from
//! one second to a minute (with `--once`, it exits 1 instead). On Ctrl-C
//! (or SIGTERM) it stops waiting for the app at once, gives back every
//! lease it holds, the event in flight's included (`release`: no attempt
//! counted, due again at once), and exits 0, within 2 s even when neither
//! the app nor the server answers.

mod forward;
mod held;
mod lane;
mod verb;

pub use verb::run;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::Secret;
use held::Held;
use lane::{Event, Failure, Lane};

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

/// After a stop, how long an ack or nack already sent may take to be
/// answered, then how long the give-back may: together under the 2 s in
/// which Ctrl-C promises an exit, whatever the server does.
const SETTLE_GRACE: Duration = Duration::from_millis(500);
const GIVE_BACK_WITHIN: Duration = Duration::from_secs(1);

/// Runs until `stop` fires (or, with `once`, nothing is due); every line
/// it prints goes to stdout, problems to stderr.
pub async fn consume(listen: Listen, stop: CancellationToken) -> anyhow::Result<()> {
    let server = server_client(&listen)?;
    let local = crate::support::outbound::builder()
        .timeout(FORWARD_TIMEOUT)
        .build()
        .context("building the HTTP client")?;
    let lane = Arc::new(Lane::new(&listen, server)?);
    let held = Arc::new(Held::default());
    let (lease, lease_seen) = watch::channel(None);
    let keeper = tokio::spawn(held::keep(lane.clone(), held.clone(), lease_seen));
    eprintln!(
        "listening to {} (source {}, destination {}), forwarding to {}",
        listen.url, listen.source, listen.destination, listen.forward_to
    );
    let stopped = async {
        stop.cancelled().await;
        tokio::time::sleep(SETTLE_GRACE).await;
    };
    let ran = tokio::select! {
        ran = pull(&listen, &lane, &held, &lease, &local, &stop) => ran,
        () = stopped => Ok(()),
    };
    keeper.abort();
    give_back(&lane, &held).await;
    ran
}

/// The client for the server, trusting `--ca` besides the system's roots.
fn server_client(listen: &Listen) -> anyhow::Result<reqwest::Client> {
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
    crate::support::outbound::build(|| {
        let b = crate::support::outbound::builder().timeout(listen.wait + Duration::from_secs(30));
        match &ca {
            Some(ca) => b.add_root_certificate(ca.clone()),
            None => b,
        }
    })
    .context("building the HTTP client")
}

/// Takes and forwards until `stop` (or, with `once`, an empty take),
/// telling the keeper through `lease` how long the leases run.
async fn pull(
    listen: &Listen,
    lane: &Lane,
    held: &Held,
    lease: &watch::Sender<Option<Duration>>,
    local: &reqwest::Client,
    stop: &CancellationToken,
) -> anyhow::Result<()> {
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
        let taken = match taken {
            Ok(taken) => {
                backoff = Duration::from_secs(1);
                taken
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
        if taken.events.is_empty() && listen.once {
            return Ok(());
        }
        lease.send_if_modified(|length| {
            let changed = *length != taken.lease;
            *length = taken.lease;
            changed
        });
        for event in &taken.events {
            held.hold(&event.lease, event.id());
        }
        // One by one, in the order taken: one event of a key per take, so
        // a key's order holds.
        for event in taken.events {
            // Lost while an earlier one was with the app (the keeper said
            // so): the server hands it out again, maybe to another consumer.
            if !held.holds(&event.lease) {
                continue;
            }
            let outcome = tokio::select! {
                biased;
                () = stop.cancelled() => return Ok(()),
                outcome = forward::forward(local, &listen.forward_to, &lane.source, &event.value) => outcome,
            };
            settle(lane, held, &event, outcome).await;
        }
    }
}

/// Acks `event` when the app took it, nacks it otherwise, and says so
/// when the server answers that its lease was lost meanwhile.
async fn settle(lane: &Lane, held: &Held, event: &Event, outcome: Result<(), String>) {
    // Lost while the app worked: the keeper said so, and the server
    // would only answer stale.
    if held.drop_lease(&event.lease).is_none() {
        return;
    }
    let (verb, body) = match outcome {
        Ok(()) => ("ack", json!({ "leases": [event.lease] })),
        Err(error) => ("nack", json!({ "leases": [event.lease], "error": error })),
    };
    let id = event.id();
    match lane.settle(verb, body).await {
        Ok(true) => {}
        Ok(false) => eprintln!(
            "the {verb} of event {id} came too late (its lease had run out): the app may see it again"
        ),
        Err(e) => {
            eprintln!("cannot {verb} event {id} ({e:#}); it comes back when its lease runs out");
        }
    }
}

/// Releases every lease still held, so those events are due again at once.
async fn give_back(lane: &Lane, held: &Held) {
    let leases = held.take_all();
    if leases.is_empty() {
        return;
    }
    let n = leases.len();
    match lane.release(leases, GIVE_BACK_WITHIN).await {
        Ok(()) => eprintln!("gave back {n} events not yet delivered"),
        Err(e) => eprintln!(
            "cannot give back {n} events ({e:#}); they come back when their leases run out"
        ),
    }
}
