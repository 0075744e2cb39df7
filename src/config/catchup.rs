//! `[sources.github_redelivery]`, `[sources.gitlab_redelivery]` (in
//! [`gitlab`]), `[sources.stripe_backfill]`, `[sources.paddle_replay]` (in
//! [`paddle`]) and `[sources.square_backfill]` (in [`square`]): the
//! catch-up jobs of a source.
//!
//! A `github` source may ask GitHub to redeliver what it failed to deliver
//! (repository, organization or GitHub App hook); a `stripe` source may list
//! the events Stripe still holds and insert the missing ones. [`validate_github`]
//! and [`validate_stripe`] turn the raw tables into the configs
//! `crate::catchup` runs on, resolving every secret and reporting every
//! problem under the key that has it.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Secret, duration, limits, secret};

mod gitlab;
mod paddle;
mod square;

pub use gitlab::{
    GitlabParent, GitlabRedeliveryConfig, Namespace, RawGitlabRedelivery,
    validate as validate_gitlab,
};
pub use paddle::{PaddleReplayConfig, RawPaddleReplay, validate as validate_paddle};
pub use square::{RawSquareBackfill, SquareBackfillConfig, validate as validate_square};

pub const GITHUB_API: &str = "https://api.github.com";
pub const STRIPE_API: &str = "https://api.stripe.com";

/// `app_id` is the numeric App ID or the App's client ID (`Iv1.…`); GitHub
/// takes either as the JWT issuer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum AppId {
    Number(i64),
    Text(String),
}

impl fmt::Display for AppId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppId::Number(n) => write!(f, "{n}"),
            AppId::Text(s) => f.write_str(s),
        }
    }
}

/// The `github_redelivery` table as written.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawGithubRedelivery {
    /// `owner/name` of a repository hook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// Login of an organization hook's organization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org: Option<String>,
    /// The hook of `repo` or `org` (64-bit, as every GitHub id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_id: Option<i64>,
    /// Secret reference: a token for `repo`/`org` hooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The GitHub App whose own hook this source receives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_id: Option<AppId>,
    /// Secret reference to the App's PEM private key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<String>,
    #[serde(default = "hour", with = "duration")]
    pub interval: Duration,
    /// How far before the last successful run the next one looks again.
    #[serde(default = "ten_minutes", with = "duration")]
    pub overlap: Duration,
    #[serde(default = "github_api")]
    pub api_url: String,
    /// Only redeliver events of these types (`X-GitHub-Event`); empty = all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub event_types: Vec<String>,
    /// Wait between two redelivery requests (GitHub asks for ≥ 1 s between
    /// mutating requests).
    #[serde(default = "second", with = "duration")]
    pub pace: Duration,
}

/// Written by hand: `token` and `private_key` may be literals.
impl fmt::Debug for RawGithubRedelivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawGithubRedelivery")
            .field("repo", &self.repo)
            .field("org", &self.org)
            .field("hook_id", &self.hook_id)
            .field("token", &self.token.as_deref().map(secret::describe))
            .field("app_id", &self.app_id)
            .field(
                "private_key",
                &self.private_key.as_deref().map(secret::describe),
            )
            .field("interval", &self.interval)
            .field("overlap", &self.overlap)
            .field("api_url", &self.api_url)
            .field("event_types", &self.event_types)
            .field("pace", &self.pace)
            .finish()
    }
}

/// The `stripe_backfill` table as written.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawStripeBackfill {
    /// Secret reference: a restricted key with read access to Events.
    pub api_key: String,
    #[serde(default = "hour", with = "duration")]
    pub interval: Duration,
    #[serde(default = "ten_minutes", with = "duration")]
    pub overlap: Duration,
    #[serde(default = "stripe_api")]
    pub api_url: String,
}

/// Written by hand: `api_key` may be a literal.
impl fmt::Debug for RawStripeBackfill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawStripeBackfill")
            .field("api_key", &secret::describe(&self.api_key))
            .field("interval", &self.interval)
            .field("overlap", &self.overlap)
            .field("api_url", &self.api_url)
            .finish()
    }
}

fn hour() -> Duration {
    Duration::from_secs(3600)
}

fn ten_minutes() -> Duration {
    Duration::from_secs(600)
}

fn second() -> Duration {
    Duration::from_secs(1)
}

fn github_api() -> String {
    GITHUB_API.to_owned()
}

fn stripe_api() -> String {
    STRIPE_API.to_owned()
}

/// Which hook's deliveries to list, and how to authenticate.
#[derive(Debug, Clone)]
pub enum HookTarget {
    Repo {
        repo: String,
        hook_id: i64,
        token: Secret,
    },
    Org {
        org: String,
        hook_id: i64,
        token: Secret,
    },
    /// `/app/hook/*`, with an RS256 JWT signed by `private_key` (PEM).
    App { app_id: AppId, private_key: Secret },
}

#[derive(Debug, Clone)]
pub struct GithubRedeliveryConfig {
    pub target: HookTarget,
    pub interval: Duration,
    pub overlap: Duration,
    /// Without a trailing `/` (GHES: `https://HOST/api/v3`).
    pub api_url: String,
    pub event_types: Vec<String>,
    pub pace: Duration,
}

#[derive(Debug, Clone)]
pub struct StripeBackfillConfig {
    pub api_key: Secret,
    pub interval: Duration,
    pub overlap: Duration,
    pub api_url: String,
}

/// Checks a `github_redelivery` table; `at` is its key.
pub fn validate_github(
    raw: &RawGithubRedelivery,
    at: &str,
    problems: &mut Vec<String>,
) -> Option<GithubRedeliveryConfig> {
    let before = problems.len();
    let target = github_target(raw, at, problems);
    limits::GITHUB_INTERVAL.check(at, raw.interval, problems);
    limits::GITHUB_OVERLAP.check(at, raw.overlap, problems);
    limits::GITHUB_PACE.check(at, raw.pace, problems);
    let api_url = check_api_url(&raw.api_url, at, problems);
    for (j, t) in raw.event_types.iter().enumerate() {
        if t.trim().is_empty() {
            problems.push(format!("{at}.event_types[{j}]: must not be empty"));
        }
    }
    (problems.len() == before).then(|| GithubRedeliveryConfig {
        target: target.expect("no problems means the target was built"),
        interval: raw.interval,
        overlap: raw.overlap,
        api_url: api_url.expect("no problems means the URL is valid"),
        event_types: raw.event_types.clone(),
        pace: raw.pace,
    })
}

fn github_target(
    raw: &RawGithubRedelivery,
    at: &str,
    problems: &mut Vec<String>,
) -> Option<HookTarget> {
    let chosen = [raw.repo.is_some(), raw.org.is_some(), raw.app_id.is_some()];
    if chosen.iter().filter(|c| **c).count() != 1 {
        problems.push(format!(
            "{at}: set exactly one of repo (with hook_id and token), org (with hook_id and token) or app_id (with private_key)"
        ));
        return None;
    }
    if let Some(app_id) = &raw.app_id {
        for (key, set) in [
            ("hook_id", raw.hook_id.is_some()),
            ("token", raw.token.is_some()),
        ] {
            if set {
                problems.push(format!(
                    "{at}.{key}: not used with app_id (an App hook is reached with the App's JWT)"
                ));
            }
        }
        match app_id {
            AppId::Number(n) if *n <= 0 => problems.push(format!(
                "{at}.app_id: must be a positive number or a client ID"
            )),
            AppId::Text(s) if s.trim().is_empty() => {
                problems.push(format!("{at}.app_id: must not be empty"))
            }
            _ => {}
        }
        let key = match &raw.private_key {
            None => {
                problems.push(format!(
                    "{at}.private_key: app_id needs the App's private key (a PEM file, e.g. \"file:/etc/hookbox/app.pem\")"
                ));
                None
            }
            Some(reference) => {
                resolve(reference, &format!("{at}.private_key"), problems).filter(|key| {
                    let ok =
                        jsonwebtoken::EncodingKey::from_rsa_pem(key.expose().as_bytes()).is_ok();
                    if !ok {
                        problems.push(format!(
                            "{at}.private_key ({}): not an RSA private key in PEM form",
                            secret::describe(reference)
                        ));
                    }
                    ok
                })
            }
        };
        return Some(HookTarget::App {
            app_id: app_id.clone(),
            private_key: key?,
        });
    }
    if raw.private_key.is_some() {
        problems.push(format!("{at}.private_key: only with app_id"));
    }
    let hook_id = hook_id(
        raw.hook_id,
        at,
        "with repo or org (the number in the hook's settings URL)",
        problems,
    );
    let token = token(
        raw.token.as_deref(),
        at,
        "with repo or org (a token allowed to read and redeliver the hook's deliveries)",
        problems,
    );
    if let Some(repo) = &raw.repo {
        let ok = repo
            .split_once('/')
            .is_some_and(|(o, n)| path_segment(o) && path_segment(n));
        if !ok {
            problems.push(format!("{at}.repo: write it as \"owner/name\""));
        }
        return Some(HookTarget::Repo {
            repo: repo.clone(),
            hook_id: hook_id?,
            token: token?,
        });
    }
    let org = raw
        .org
        .clone()
        .expect("exactly one of repo/org/app_id is set");
    if !path_segment(&org) {
        problems.push(format!("{at}.org: an organization login, like \"acme\""));
    }
    Some(HookTarget::Org {
        org,
        hook_id: hook_id?,
        token: token?,
    })
}

/// Checks a `stripe_backfill` table; `at` is its key.
pub fn validate_stripe(
    raw: &RawStripeBackfill,
    at: &str,
    problems: &mut Vec<String>,
) -> Option<StripeBackfillConfig> {
    let before = problems.len();
    let api_key = resolve(&raw.api_key, &format!("{at}.api_key"), problems);
    limits::STRIPE_INTERVAL.check(at, raw.interval, problems);
    limits::STRIPE_OVERLAP.check(at, raw.overlap, problems);
    let api_url = check_api_url(&raw.api_url, at, problems);
    (problems.len() == before).then(|| StripeBackfillConfig {
        api_key: api_key.expect("no problems means the key resolved"),
        interval: raw.interval,
        overlap: raw.overlap,
        api_url: api_url.expect("no problems means the URL is valid"),
    })
}

/// A redelivery job's `hook_id`: needed, and positive; `hint` says where
/// the user finds it.
fn hook_id(raw: Option<i64>, at: &str, hint: &str, problems: &mut Vec<String>) -> Option<i64> {
    match raw {
        Some(id) if id > 0 => Some(id),
        Some(_) => {
            problems.push(format!("{at}.hook_id: must be a positive number"));
            None
        }
        None => {
            problems.push(format!("{at}.hook_id: needed {hint}"));
            None
        }
    }
}

/// A redelivery job's `token`, resolved; `hint` says which token it takes.
fn token(raw: Option<&str>, at: &str, hint: &str, problems: &mut Vec<String>) -> Option<Secret> {
    match raw {
        Some(reference) => resolve(reference, &format!("{at}.token"), problems),
        None => {
            problems.push(format!("{at}.token: needed {hint}"));
            None
        }
    }
}

fn resolve(reference: &str, at: &str, problems: &mut Vec<String>) -> Option<Secret> {
    secret::resolve(reference)
        .map_err(|why| problems.push(format!("{at} ({}): {why}", secret::describe(reference))))
        .ok()
}

/// An http(s) base URL, returned without its trailing `/`.
fn check_api_url(url: &str, at: &str, problems: &mut Vec<String>) -> Option<String> {
    match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {
            if u.query().is_some() || !u.username().is_empty() {
                problems.push(format!("{at}.api_url: no query or credentials, please"));
                return None;
            }
            Some(url.trim_end_matches('/').to_owned())
        }
        Ok(_) => {
            problems.push(format!("{at}.api_url: an http(s) URL with a host"));
            None
        }
        Err(e) => {
            problems.push(format!("{at}.api_url: not a URL: {e}"));
            None
        }
    }
}

/// A name GitHub allows in a URL path: letters, digits, `-`, `_`, `.`.
fn path_segment(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// What `hookbox check` prints: secret references described, literals hidden.
#[cfg(test)]
mod tests;
