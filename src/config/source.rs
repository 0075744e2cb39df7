//! One `[[sources]]` entry: the raw table as written and the validated
//! [`SourceConfig`] the receiver runs on.
//!
//! [`validate`] checks the fields every kind shares (secrets,
//! tolerance, order key, body limit) and the kind-specific ones, refusing a
//! key that belongs to another kind (an ignored key misleads); the parts
//! with modules of their own (the `hmac` scheme, destinations, catch-up,
//! allowed addresses) are handed to them. Uniqueness of names is a
//! cross-check and lives with [`super::validate()`].

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::hmac::{self, HmacConfig, RawHmac};
use super::secret::{self, Secret};
use super::server::RawServer;
use super::{
    AllowIps, DeliverConfig, GithubRedeliveryConfig, GitlabRedeliveryConfig, Kind, Kinds,
    PaddleReplayConfig, RawDestinations, RawGithubRedelivery, RawGitlabRedelivery, RawPaddleReplay,
    RawSquareBackfill, RawStripeBackfill, SquareBackfillConfig, StripeBackfillConfig, catchup,
    deliver, duration, edge, limits,
};

/// `Debug` is written by hand below: `secrets` may hold literals.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawSource {
    pub name: String,
    /// A provider's name (`crate::ingress::receive::registry`); validation looks
    /// it up among the [`Kinds`] it is given.
    pub kind: String,
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Secret references; any one matching passes (rotation).
    #[serde(default)]
    pub secrets: Vec<String>,
    /// Allowed clock difference for timestamped schemes, both directions;
    /// unset: the kind's default ([`super::KindFacts::default_tolerance`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "duration::option"
    )]
    pub tolerance: Option<Duration>,
    /// JSON pointers; the first non-null one is the event's ordering key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub order_key: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_body_bytes: Option<u64>,
    /// Only for `kind = "hmac"`: how the generic scheme is laid out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hmac: Option<RawHmac>,
    /// Where events go; without any they are kept as `stored`.
    #[serde(default, skip_serializing_if = "RawDestinations::is_none")]
    pub deliver: RawDestinations,
    /// Only for `kind = "github"`: ask GitHub to redeliver failed deliveries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github_redelivery: Option<RawGithubRedelivery>,
    /// Only for `kind = "gitlab"`: ask GitLab to resend failed events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gitlab_redelivery: Option<RawGitlabRedelivery>,
    /// Only for `kind = "stripe"`: fetch missed events from Stripe's API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stripe_backfill: Option<RawStripeBackfill>,
    /// Only for `kind = "paddle"`: ask Paddle to replay failed notifications.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paddle_replay: Option<RawPaddleReplay>,
    /// Only for `kind = "square"`: fetch missed events from Square's
    /// Events API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub square_backfill: Option<RawSquareBackfill>,
    /// CIDRs and named sets (`"github"`, `"stripe"`) allowed to post;
    /// empty: every address.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_ips: Vec<String>,
    /// Kinds that sign the URL (`twilio`, `square`): the URL exactly as
    /// the provider calls it, without the query (the request's own query
    /// is appended as received).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_url: Option<String>,
    /// Only for `kind = "meta"`: the secret reference Meta's subscription
    /// handshake (`GET ?hub.verify_token=`) must present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_token: Option<String>,
}

impl fmt::Debug for RawSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secrets: Vec<String> = self.secrets.iter().map(|s| secret::describe(s)).collect();
        f.debug_struct("RawSource")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("enabled", &self.enabled)
            .field("secrets", &secrets)
            .field("tolerance", &self.tolerance)
            .field("order_key", &self.order_key)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("hmac", &self.hmac)
            .field("deliver", &self.deliver)
            .field("github_redelivery", &self.github_redelivery)
            .field("gitlab_redelivery", &self.gitlab_redelivery)
            .field("stripe_backfill", &self.stripe_backfill)
            .field("paddle_replay", &self.paddle_replay)
            .field("square_backfill", &self.square_backfill)
            .field("allow_ips", &self.allow_ips)
            .field("public_url", &self.public_url)
            .field(
                "verify_token",
                &self.verify_token.as_deref().map(secret::describe),
            )
            .finish()
    }
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone)]
pub struct SourceConfig {
    pub name: String,
    pub kind: Kind,
    pub secrets: Vec<Secret>,
    pub tolerance: Duration,
    pub order_key: Vec<String>,
    pub max_body_bytes: u64,
    pub hmac: Option<HmacConfig>,
    /// Where events go, each with its filter; empty: events are stored
    /// for the API, not dispatched.
    pub destinations: Vec<DeliverConfig>,
    pub github_redelivery: Option<GithubRedeliveryConfig>,
    pub gitlab_redelivery: Option<GitlabRedeliveryConfig>,
    pub stripe_backfill: Option<StripeBackfillConfig>,
    pub paddle_replay: Option<PaddleReplayConfig>,
    pub square_backfill: Option<SquareBackfillConfig>,
    /// `None`: every address may post.
    pub allow_ips: Option<AllowIps>,
    /// The URL the provider signs, for the kinds that sign it; checked
    /// to be an absolute `http(s)` URL without query or fragment.
    pub public_url: Option<String>,
    /// Meta's handshake token (kind `meta` only, required there).
    pub verify_token: Option<Secret>,
}

/// The kind `src` names, or a problem naming the kinds there are.
pub(super) fn find_kind(
    src: &RawSource,
    kinds: &dyn Kinds,
    at: &str,
    problems: &mut Vec<String>,
) -> Option<Kind> {
    let found = kinds.find(&src.kind);
    if found.is_none() {
        problems.push(format!(
            "{at}.kind: unknown kind {:?}; expected one of: {}",
            src.kind,
            kinds.names().join(", ")
        ));
    }
    found
}

/// Checks one enabled source of `kind`, `at` naming it in every problem;
/// `None` when any problem was found.
pub(super) fn validate(
    src: &RawSource,
    kind: Kind,
    server: &RawServer,
    at: &str,
    problems: &mut Vec<String>,
) -> Option<SourceConfig> {
    let before = problems.len();
    let mut secrets = Vec::new();
    if src.secrets.is_empty() {
        problems.push(format!(
            "{at}.secrets: an enabled source needs at least one secret (an empty key is a key anyone has)"
        ));
    }
    for (j, reference) in src.secrets.iter().enumerate() {
        match secret::resolve(reference) {
            Ok(s) => secrets.push(s),
            Err(why) => problems.push(format!(
                "{at}.secrets[{j}] ({}): {why}",
                secret::describe(reference)
            )),
        }
    }
    for (j, s) in secrets.iter().enumerate() {
        if let Err(why) = (kind.facts().check_secret)(s) {
            problems.push(format!("{at}.secrets[{j}]: {why}"));
        }
    }
    let verify_token = validate_verify_token(src, kind, at, problems);
    let tolerance = src.tolerance.unwrap_or(kind.default_tolerance());
    limits::TOLERANCE.check(at, tolerance, problems);
    validate_public_url(src, kind, at, problems);
    for (j, pointer) in src.order_key.iter().enumerate() {
        if !pointer.starts_with('/') {
            problems.push(format!(
                "{at}.order_key[{j}]: a JSON pointer starts with '/'"
            ));
        }
    }
    if let Some(max_body_bytes) = src.max_body_bytes {
        limits::SOURCE_MAX_BODY_BYTES.check(at, max_body_bytes, problems);
    }
    let hmac = match (&src.hmac, kind.as_str()) {
        (Some(h), "hmac") => hmac::validate(h, &format!("{at}.hmac"), problems),
        (None, "hmac") => {
            problems.push(format!(
                "{at}.hmac: kind \"hmac\" needs an [sources.hmac] table"
            ));
            None
        }
        (Some(_), _) => {
            problems.push(format!("{at}.hmac: only for kind \"hmac\""));
            None
        }
        (None, _) => None,
    };
    let destinations = deliver::validate_all(&src.deliver, at, problems);
    let github_redelivery = match (&src.github_redelivery, kind.as_str()) {
        (Some(g), "github") => {
            catchup::validate_github(g, &format!("{at}.github_redelivery"), problems)
        }
        (Some(_), _) => {
            problems.push(format!("{at}.github_redelivery: only for kind \"github\""));
            None
        }
        (None, _) => None,
    };
    let gitlab_redelivery = match (&src.gitlab_redelivery, kind.as_str()) {
        (Some(g), "gitlab") => {
            catchup::validate_gitlab(g, &format!("{at}.gitlab_redelivery"), problems)
        }
        (Some(_), _) => {
            problems.push(format!("{at}.gitlab_redelivery: only for kind \"gitlab\""));
            None
        }
        (None, _) => None,
    };
    let stripe_backfill = match (&src.stripe_backfill, kind.as_str()) {
        (Some(s), "stripe") => {
            catchup::validate_stripe(s, &format!("{at}.stripe_backfill"), problems)
        }
        (Some(_), _) => {
            problems.push(format!("{at}.stripe_backfill: only for kind \"stripe\""));
            None
        }
        (None, _) => None,
    };
    let paddle_replay = match (&src.paddle_replay, kind.as_str()) {
        (Some(p), "paddle") => {
            catchup::validate_paddle(p, &format!("{at}.paddle_replay"), problems)
        }
        (Some(_), _) => {
            problems.push(format!("{at}.paddle_replay: only for kind \"paddle\""));
            None
        }
        (None, _) => None,
    };
    let square_backfill = match (&src.square_backfill, kind.as_str()) {
        (Some(s), "square") => {
            catchup::validate_square(s, &format!("{at}.square_backfill"), problems)
        }
        (Some(_), _) => {
            problems.push(format!("{at}.square_backfill: only for kind \"square\""));
            None
        }
        (None, _) => None,
    };
    let allow_ips = edge::validate_allow_ips(&src.allow_ips, at, problems);
    (problems.len() == before).then(|| SourceConfig {
        name: src.name.clone(),
        kind,
        secrets,
        tolerance,
        order_key: src.order_key.clone(),
        max_body_bytes: src.max_body_bytes.unwrap_or(server.max_body_bytes),
        hmac,
        destinations: destinations.expect("no problems means the destinations were built"),
        github_redelivery,
        gitlab_redelivery,
        stripe_backfill,
        paddle_replay,
        square_backfill,
        allow_ips,
        public_url: src.public_url.clone(),
        verify_token,
    })
}

/// `public_url`: required for the kinds that sign the URL, refused for
/// the others (it would be ignored, and an ignored key misleads). The
/// query is left out because the request's own query string is signed
/// too, and appended as received: Twilio's JSON callbacks carry their
/// `bodySHA256` there, different on every request.
fn validate_public_url(src: &RawSource, kind: Kind, at: &str, problems: &mut Vec<String>) {
    let key = format!("{at}.public_url");
    let Some(raw) = &src.public_url else {
        if kind.signs_url() {
            problems.push(format!(
                "{key}: kind {:?} signs the URL it calls: set public_url to the URL exactly as \
                 entered in the provider's console (e.g. \"https://hooks.example.com/hooks/{}\")",
                kind.as_str(),
                src.name
            ));
        }
        return;
    };
    if !kind.signs_url() {
        problems.push(format!(
            "{key}: only for kinds that sign the URL (\"twilio\", \"square\")"
        ));
        return;
    }
    match url::Url::parse(raw) {
        Err(e) => problems.push(format!("{key}: {raw:?} is not an absolute URL: {e}")),
        Ok(url) if !matches!(url.scheme(), "http" | "https") || !raw.contains("://") => {
            problems.push(format!(
                "{key}: {raw:?} must start with https:// (or http://)"
            ));
        }
        Ok(_) if raw.contains(['?', '#']) => problems.push(format!(
            "{key}: {raw:?}: leave out the query and fragment; the query of each request is \
             appended as received"
        )),
        Ok(_) => {}
    }
}

/// `verify_token`: required for kind `meta`, refused elsewhere.
fn validate_verify_token(
    src: &RawSource,
    kind: Kind,
    at: &str,
    problems: &mut Vec<String>,
) -> Option<Secret> {
    match (&src.verify_token, kind.as_str()) {
        (Some(reference), "meta") => match secret::resolve(reference) {
            Ok(token) => Some(token),
            Err(why) => {
                problems.push(format!(
                    "{at}.verify_token ({}): {why}",
                    secret::describe(reference)
                ));
                None
            }
        },
        (None, "meta") => {
            problems.push(format!(
                "{at}.verify_token: kind \"meta\" needs the token you type into Meta's \
                 webhook settings, which its subscription handshake sends back"
            ));
            None
        }
        (Some(_), _) => {
            problems.push(format!("{at}.verify_token: only for kind \"meta\""));
            None
        }
        (None, _) => None,
    }
}
