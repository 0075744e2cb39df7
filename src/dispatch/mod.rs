//! Dispatch: handing stored events to the user's code, one attempt at a time.
//!
//! This module owns the push kinds of destination: [`url`] POSTs a Standard
//! Webhooks-signed request, [`command`] runs a program with the body on
//! stdin, and hookbox's outbound signature ([`sign`]). Each makes one
//! attempt by the contract of `crate::delivery` (a `Job` in, an `Attempt`
//! out) and never touches the database: the caller records it.
//!
//! The loop that claims due events and runs these attempts within each
//! source's concurrency limit is [`worker`]; the settle rule, the breaker
//! and the pauses are `crate::delivery`'s, claiming and per-key ordering
//! are SQL, in `crate::store::deliveries`.

pub mod command;
pub mod sign;
pub mod url;
pub mod worker;

use std::sync::Arc;

use crate::config::{DeliverConfig, Destination};
use crate::delivery::{Attempt, Job};

/// A source's destination, ready to run jobs.
pub enum Deliverer {
    Url(url::UrlDestination),
    Command(command::CommandDestination),
}

impl Deliverer {
    /// `client` is the process-wide one from [`url::client`], shared by
    /// every url destination so connections are pooled; `withheld`, the
    /// variables a command must not inherit (`Config::secret_env`). `None`
    /// for a pull destination: nothing is pushed to it (`crate::pull`).
    pub fn new(
        config: &DeliverConfig,
        client: &reqwest::Client,
        withheld: &Arc<[String]>,
    ) -> Option<Self> {
        match &config.destination {
            Destination::Url { url, signing_key } => {
                Some(Deliverer::Url(url::UrlDestination::new(
                    client.clone(),
                    url.clone(),
                    signing_key.clone(),
                    config.timeout,
                    config.permanent_statuses.clone(),
                )))
            }
            Destination::Command { template, .. } => {
                Some(Deliverer::Command(command::CommandDestination::new(
                    template.clone(),
                    config.timeout,
                    withheld.clone(),
                )))
            }
            Destination::Pull { .. } => None,
        }
    }

    /// Whether an attempt still running when the shutdown grace ends is
    /// cut short and recorded (a command: its process group is killed, and
    /// what it did so far may have had effects) rather than abandoned with
    /// its lease given back (a url request).
    pub fn interruptible(&self) -> bool {
        matches!(self, Deliverer::Command(_))
    }

    pub async fn deliver(&self, job: &Job) -> Attempt {
        match self {
            Deliverer::Url(d) => d.deliver(job).await,
            Deliverer::Command(d) => d.deliver(job).await,
        }
    }
}
