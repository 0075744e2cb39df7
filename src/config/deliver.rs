//! `[sources.deliver]`: where a source's events go, and how hard hookbox
//! tries.
//!
//! A destination is either `url` (an HTTP POST signed the Standard Webhooks
//! way with `signing_secret`) or `command` (an argv run without a shell),
//! never both, with an optional filter ([`crate::route`]): an event it
//! does not match is kept as `stored`, not dispatched. [`validate`] turns
//! the raw table into a [`DeliverConfig`],
//! resolving the signing secret to its HMAC key, and reports every problem
//! under the key that has it. `crate::dispatch` is what uses the result.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{duration, limits, secret};
use crate::route::Filter;

/// The `deliver` table as written.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawDeliver {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Program and arguments, run directly (no shell).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Secret reference; a Standard Webhooks `whsec_` secret. Required with
    /// `url`, refused with `command`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signing_secret: Option<String>,
    /// Per attempt: the whole HTTP exchange, or the command's run time.
    #[serde(with = "duration")]
    pub timeout: Duration,
    /// Attempts in all, the first included, before the event goes `dead`.
    pub max_attempts: u32,
    #[serde(with = "duration")]
    pub backoff_base: Duration,
    #[serde(with = "duration")]
    pub backoff_cap: Duration,
    /// Dispatches of this source in flight at once.
    pub concurrency: usize,
    /// HTTP statuses that send the event straight to `dead`.
    pub permanent_statuses: Vec<u16>,
    /// Event-type globs; empty: every type.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<String>,
    /// JSON pointer → a value or a list of values, any of which matches.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub when: BTreeMap<String, toml::Value>,
}

impl Default for RawDeliver {
    fn default() -> Self {
        RawDeliver {
            url: None,
            command: None,
            signing_secret: None,
            timeout: Duration::from_secs(30),
            max_attempts: 12,
            backoff_base: Duration::from_secs(30),
            backoff_cap: Duration::from_secs(3600),
            concurrency: 4,
            permanent_statuses: vec![400, 401, 403, 404, 410, 422],
            events: Vec::new(),
            when: BTreeMap::new(),
        }
    }
}

/// Written by hand so a literal signing secret never reaches a log line.
impl fmt::Debug for RawDeliver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawDeliver")
            .field("url", &self.url)
            .field("command", &self.command)
            .field(
                "signing_secret",
                &self.signing_secret.as_deref().map(secret::describe),
            )
            .field("timeout", &self.timeout)
            .field("max_attempts", &self.max_attempts)
            .field("backoff_base", &self.backoff_base)
            .field("backoff_cap", &self.backoff_cap)
            .field("concurrency", &self.concurrency)
            .field("permanent_statuses", &self.permanent_statuses)
            .field("events", &self.events)
            .field("when", &self.when)
            .finish()
    }
}

/// A validated destination with its retry policy.
#[derive(Debug, Clone)]
pub struct DeliverConfig {
    pub destination: Destination,
    /// Which events go; the others are kept as `stored`.
    pub filter: Filter,
    pub timeout: Duration,
    pub max_attempts: u32,
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    pub concurrency: usize,
    pub permanent_statuses: Vec<u16>,
}

#[derive(Clone, PartialEq, Eq)]
pub enum Destination {
    /// POST to an http(s) URL; `signing_key` is the HMAC key decoded from
    /// the `whsec_` secret.
    Url {
        url: reqwest::Url,
        signing_key: Vec<u8>,
    },
    /// Run `argv[0]` with the rest as arguments; never empty. `template`
    /// is the same argv with its placeholders parsed.
    Command {
        argv: Vec<String>,
        template: crate::dispatch::argv::Template,
    },
}

/// Written by hand: the key is shown as `[redacted]`.
impl fmt::Debug for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Destination::Url { url, .. } => f
                .debug_struct("Url")
                .field("url", &url.as_str())
                .field("signing_key", &"[redacted]")
                .finish(),
            Destination::Command { argv, .. } => {
                f.debug_struct("Command").field("argv", argv).finish()
            }
        }
    }
}

/// Checks a `deliver` table; `at` is its key (`sources[0] ("github").deliver`).
/// Pushes every problem found and returns the config only when there is none.
pub fn validate(raw: &RawDeliver, at: &str, problems: &mut Vec<String>) -> Option<DeliverConfig> {
    let before = problems.len();
    let filter = Filter::parse(&raw.events, &raw.when, at, problems);
    let destination = match (&raw.url, &raw.command) {
        (Some(url), None) => url_destination(url, raw.signing_secret.as_deref(), at, problems),
        (None, Some(argv)) => {
            if raw.signing_secret.is_some() {
                problems.push(format!(
                    "{at}.signing_secret: only for url destinations (a command is not sent signed requests)"
                ));
            }
            command_destination(argv, at, problems)
        }
        (Some(_), Some(_)) => {
            problems.push(format!("{at}: set url or command, not both"));
            None
        }
        (None, None) => {
            problems.push(format!("{at}: set url or command"));
            None
        }
    };
    limits::DELIVER_TIMEOUT.check(at, raw.timeout, problems);
    limits::DELIVER_MAX_ATTEMPTS.check(at, raw.max_attempts, problems);
    limits::DELIVER_BACKOFF_BASE.check(at, raw.backoff_base, problems);
    limits::DELIVER_BACKOFF_CAP.check(at, raw.backoff_cap, problems);
    limits::DELIVER_CONCURRENCY.check(at, raw.concurrency, problems);
    if raw.backoff_base > raw.backoff_cap {
        problems.push(format!(
            "{at}.backoff_base: must not be longer than backoff_cap ({})",
            humantime::format_duration(raw.backoff_cap)
        ));
    }
    for (j, status) in raw.permanent_statuses.iter().enumerate() {
        if !(300..=599).contains(status) {
            problems.push(format!(
                "{at}.permanent_statuses[{j}]: {status} is not a failure status (300-599)"
            ));
        }
    }
    (problems.len() == before).then(|| DeliverConfig {
        destination: destination.expect("no problems means the destination was built"),
        filter: filter.expect("no problems means the filter was built"),
        timeout: raw.timeout,
        max_attempts: raw.max_attempts,
        backoff_base: raw.backoff_base,
        backoff_cap: raw.backoff_cap,
        concurrency: raw.concurrency,
        permanent_statuses: raw.permanent_statuses.clone(),
    })
}

fn url_destination(
    url: &str,
    signing_secret: Option<&str>,
    at: &str,
    problems: &mut Vec<String>,
) -> Option<Destination> {
    // The URL itself stays out of messages: it may carry a password.
    let parsed = match reqwest::Url::parse(url) {
        Ok(u) if !matches!(u.scheme(), "http" | "https") => {
            problems.push(format!("{at}.url: the scheme must be http or https"));
            None
        }
        Ok(u) if u.host_str().is_none_or(str::is_empty) => {
            problems.push(format!("{at}.url: has no host"));
            None
        }
        Ok(u) => Some(u),
        Err(e) => {
            problems.push(format!("{at}.url: not a URL: {e}"));
            None
        }
    };
    let Some(reference) = signing_secret else {
        problems.push(format!(
            "{at}.signing_secret: a url destination needs one (a Standard Webhooks `whsec_` secret) so the receiver can verify hookbox"
        ));
        return None;
    };
    let key = match secret::resolve(reference) {
        Ok(s) => crate::receive::standard::key_from_secret(&s).or_else(|| {
            problems.push(format!(
                "{at}.signing_secret ({}): a Standard Webhooks secret is `whsec_` followed by base64",
                secret::describe(reference)
            ));
            None
        }),
        Err(why) => {
            problems.push(format!(
                "{at}.signing_secret ({}): {why}",
                secret::describe(reference)
            ));
            None
        }
    };
    Some(Destination::Url {
        url: parsed?,
        signing_key: key?,
    })
}

fn command_destination(
    argv: &[String],
    at: &str,
    problems: &mut Vec<String>,
) -> Option<Destination> {
    match argv.first() {
        None => {
            problems.push(format!(
                "{at}.command: must name a program, e.g. [\"/usr/local/bin/handler\"]"
            ));
            None
        }
        Some(program) if program.is_empty() => {
            problems.push(format!("{at}.command[0]: the program must not be empty"));
            None
        }
        Some(_) => match crate::dispatch::argv::Template::parse(argv) {
            Ok(template) => Some(Destination::Command {
                argv: argv.to_vec(),
                template,
            }),
            Err((i, why)) => {
                problems.push(format!("{at}.command[{i}]: {why}"));
                None
            }
        },
    }
}

/// What `hookbox check` prints for a `deliver` table: the secret described
/// as every other one, and a password in the URL hidden.
pub fn redact(raw: &mut RawDeliver) {
    if let Some(s) = &mut raw.signing_secret {
        *s = secret::describe(s);
    }
    if let Some(url) = &mut raw.url
        && let Ok(mut parsed) = reqwest::Url::parse(url)
        && parsed.password().is_some()
        && parsed.set_password(Some("redacted")).is_ok()
    {
        *url = parsed.to_string();
    }
}
