//! Configuration: TOML in, a validated [`Config`] with resolved secrets out.
//!
//! Loading has two stages. Serde reads the file into the `Raw*` types
//! (`deny_unknown_fields`, so a typo is an error and not a silently ignored
//! key). [`validate`] then checks every field, resolves every secret
//! reference and collects *all* problems, each naming its key, before
//! anything binds a port or opens the database. The `Raw*` types are also
//! what `hookbox check` prints, with secret references redacted.
//!
//! Without a file, hookbox runs on the embedded default (see [`embedded`]):
//! the four common providers, each enabled when its secret is in the
//! environment.

mod admin;
mod alerts;
mod catchup;
mod deliver;
mod duration;
mod edge;
pub mod limits;
mod ops;
mod orphans;
mod secret;
mod tls;

use std::collections::HashSet;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use admin::{AdminConfig, RawAdmin};
pub use alerts::{AlertConfig, Condition, Format, RawAlert, SigningKey};
pub use catchup::{
    AppId, GithubRedeliveryConfig, GitlabParent, GitlabRedeliveryConfig, HookTarget, Namespace,
    RawGithubRedelivery, RawGitlabRedelivery, RawStripeBackfill, StripeBackfillConfig,
};
pub use deliver::{DEFAULT_NAME, DeliverConfig, Destination, RawDeliver, RawDestinations};
pub use edge::{AllowIps, EdgeConfig, ForwardedHeader, NamedSet, RawEdge, parse_net};
pub use ops::{BackupConfig, RetentionConfig, SearchConfig};
pub use secret::{Secret, resolve as resolve_secret};
pub use tls::{AcmeConfig, RawAcme, RawTls, TlsConfig, TlsFiles};

/// Where the config is looked for when `--config` is not given.
pub const SYSTEM_CONFIG: &str = "/etc/hookbox/hookbox.toml";

/// 25 MiB: GitHub's payload cap, the largest any provider documents.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 25 * 1024 * 1024;

// ---------------------------------------------------------------- raw ---

/// The config file as written.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub server: RawServer,
    #[serde(default)]
    pub admin: RawAdmin,
    #[serde(default)]
    pub retention: RetentionConfig,
    #[serde(default)]
    pub backup: BackupConfig,
    #[serde(default)]
    pub search: SearchConfig,
    #[serde(default)]
    pub edge: RawEdge,
    #[serde(default)]
    pub sources: Vec<RawSource>,
    /// Where to send a message when something needs a person.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alerts: Vec<RawAlert>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawServer {
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    pub database: PathBuf,
    pub durability: Durability,
    pub max_body_bytes: u64,
    /// How long a client may take to send its request headers.
    #[serde(with = "duration")]
    pub header_timeout: Duration,
    /// How long a client may take to send its body once headers are in.
    #[serde(with = "duration")]
    pub body_timeout: Duration,
    /// Requests waiting for the writer beyond this get 503 at once.
    pub writer_queue: usize,
    /// Peers (CIDRs or addresses) whose forwarding header names the client.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub trusted_proxies: Vec<String>,
    /// The header a trusted proxy sets: `x-forwarded-for` or `forwarded`.
    pub forwarded_header: ForwardedHeader,
    /// Connections each listener serves at once; past it, hookbox stops
    /// accepting until one closes (the kernel queues the rest).
    pub max_connections: usize,
    /// Certificate and key files; when set the public listener speaks
    /// only TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<RawTls>,
}

impl Default for RawServer {
    fn default() -> Self {
        RawServer {
            listen: SocketAddr::from(([0, 0, 0, 0], 8080)),
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 8081)),
            database: default_database(),
            durability: Durability::Full,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            writer_queue: 8192,
            trusted_proxies: Vec::new(),
            forwarded_header: ForwardedHeader::XForwardedFor,
            max_connections: 1024,
            tls: None,
        }
    }
}

/// `synchronous` for the write connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// `synchronous=FULL`: a 2xx survives power loss.
    Full,
    /// `synchronous=NORMAL`: a 2xx survives a crash of hookbox, but the last
    /// commits before a power loss may be lost.
    Normal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Github,
    Stripe,
    Shopify,
    Standard,
    Gitlab,
    Slack,
    Hmac,
    Linear,
    Discord,
    Sendgrid,
    Mailgun,
    Meta,
    Paddle,
    Twilio,
    Square,
    Zoom,
    Twitch,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Github => "github",
            Kind::Stripe => "stripe",
            Kind::Shopify => "shopify",
            Kind::Standard => "standard",
            Kind::Gitlab => "gitlab",
            Kind::Slack => "slack",
            Kind::Hmac => "hmac",
            Kind::Linear => "linear",
            Kind::Discord => "discord",
            Kind::Sendgrid => "sendgrid",
            Kind::Mailgun => "mailgun",
            Kind::Meta => "meta",
            Kind::Paddle => "paddle",
            Kind::Twilio => "twilio",
            Kind::Square => "square",
            Kind::Zoom => "zoom",
            Kind::Twitch => "twitch",
        }
    }

    /// The window a timestamped kind allows when `tolerance` is not set:
    /// the provider's own where it documents one (Paddle's SDKs allow 5 s,
    /// Linear's 60 s, Twitch says to refuse messages older than 10
    /// minutes), else 5 min.
    pub fn default_tolerance(self) -> Duration {
        match self {
            Kind::Paddle => Duration::from_secs(5),
            Kind::Linear => Duration::from_secs(60),
            Kind::Twitch => Duration::from_secs(600),
            _ => Duration::from_secs(300),
        }
    }

    /// Kinds whose signature covers the URL the provider called, which
    /// hookbox cannot see behind a proxy: they need `public_url`.
    pub fn signs_url(self) -> bool {
        matches!(self, Kind::Twilio | Kind::Square)
    }
}

/// `Debug` is written by hand below: `secrets` may hold literals.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawSource {
    pub name: String,
    pub kind: Kind,
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Secret references; any one matching passes (rotation).
    #[serde(default)]
    pub secrets: Vec<String>,
    /// Allowed clock difference for timestamped schemes, both directions;
    /// unset: the kind's default ([`Kind::default_tolerance`]).
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
            .field("allow_ips", &self.allow_ips)
            .field("public_url", &self.public_url)
            .field(
                "verify_token",
                &self.verify_token.as_deref().map(secret::describe),
            )
            .finish()
    }
}

/// The generic HMAC-SHA256 scheme, for signers no other kind covers.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawHmac {
    /// Header carrying the signature, e.g. `X-Signature`.
    pub header: String,
    /// Text before the encoded MAC in that header, e.g. `sha256=`.
    #[serde(default)]
    pub prefix: String,
    #[serde(default)]
    pub encoding: Encoding,
    /// Header carrying a unix-seconds timestamp, checked against `tolerance`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp_header: Option<String>,
    /// What is signed: `{body}` and `{timestamp}` placeholders around literal
    /// text. Default `{timestamp}.{body}` with a timestamp header, else `{body}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_payload: Option<String>,
    /// Delivery id from this header, or from `id_pointer` in a JSON body;
    /// with neither, the SHA-256 of the body is the id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_header: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_pointer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_type_header: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_type_pointer: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    #[default]
    Hex,
    Base64,
}

fn yes() -> bool {
    true
}

/// `$STATE_DIRECTORY/hookbox.db` under systemd, else `./hookbox.db`.
fn default_database() -> PathBuf {
    std::env::var_os("STATE_DIRECTORY")
        .and_then(|dirs| std::env::split_paths(&dirs).next())
        .map(|dir| dir.join("hookbox.db"))
        .unwrap_or_else(|| PathBuf::from("hookbox.db"))
}

// ---------------------------------------------------------- validated ---

/// The validated config every part of hookbox runs on.
#[derive(Debug, Clone)]
pub struct Config {
    pub server: RawServer,
    pub admin: AdminConfig,
    pub retention: RetentionConfig,
    pub backup: BackupConfig,
    pub search: SearchConfig,
    pub edge: EdgeConfig,
    /// `None`: the public listener speaks plain HTTP.
    pub tls: Option<TlsConfig>,
    pub sources: Vec<SourceConfig>,
    pub alerts: Vec<AlertConfig>,
    /// Where this config came from, for logs and `hookbox check`.
    pub origin: String,
    /// Sources of the embedded default left off for want of a secret,
    /// with the variable that would enable each.
    pub disabled_defaults: Vec<(String, String)>,
    /// The input, for `hookbox check` to print redacted.
    pub raw: RawConfig,
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
    /// `None`: every address may post.
    pub allow_ips: Option<AllowIps>,
    /// The URL the provider signs, for the kinds that sign it; checked
    /// to be an absolute `http(s)` URL without query or fragment.
    pub public_url: Option<String>,
    /// Meta's handshake token (kind `meta` only, required there).
    pub verify_token: Option<Secret>,
}

#[derive(Debug, Clone)]
pub struct HmacConfig {
    /// Lowercased header names (the `HeaderMap` stores them so).
    pub header: String,
    pub prefix: String,
    pub encoding: Encoding,
    pub timestamp_header: Option<String>,
    pub signed_payload: Vec<PayloadPart>,
    pub id: IdFrom,
    pub event_type: Option<Field>,
}

/// One piece of the generic scheme's signed string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadPart {
    Literal(Vec<u8>),
    Timestamp,
    Body,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    Header(String),
    Pointer(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdFrom {
    Field(Field),
    BodyHash,
}

/// Every problem found, one per line, each naming its key.
#[derive(Debug)]
pub struct ConfigError {
    pub origin: String,
    pub problems: Vec<String>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "invalid configuration ({}):", self.origin)?;
        for p in &self.problems {
            writeln!(f, "  - {p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

// ------------------------------------------------------------ loading ---

/// Loads the config: `path` if given, else [`SYSTEM_CONFIG`] when it
/// exists, else the embedded default.
pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
    load_with(path, |raw| raw)
}

/// A secret that is valid for every kind (the published Standard Webhooks
/// test-vector secret), standing in for secrets not resolved.
const PLACEHOLDER_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// [`load`] for the commands that only read or copy the database
/// (`events`, `backup`, `purge`, `replay`, `healthcheck`): secrets are not
/// resolved but stood in for, and catch-up, TLS and the admin token, which
/// they do not use, are left out. So `sudo hookbox events` works outside
/// the unit, without `$CREDENTIALS_DIRECTORY` or the key files.
pub fn load_without_secrets(path: Option<&Path>) -> Result<Config, ConfigError> {
    load_with(path, |mut raw| {
        raw.admin.token = None;
        raw.server.tls = None;
        // Alerts are only sent by `serve` and `hookbox alerts test`.
        raw.alerts.clear();
        for source in &mut raw.sources {
            for secret in &mut source.secrets {
                *secret = placeholder_secret(source.kind).to_owned();
            }
            if source.verify_token.is_some() {
                source.verify_token = Some(PLACEHOLDER_SECRET.to_owned());
            }
            for deliver in source.deliver.iter_mut() {
                if deliver.signing_secret.is_some() {
                    deliver.signing_secret = Some(PLACEHOLDER_SECRET.to_owned());
                }
            }
            source.github_redelivery = None;
            source.gitlab_redelivery = None;
            source.stripe_backfill = None;
        }
        raw
    })
}

/// [`PLACEHOLDER_SECRET`], or for the kinds whose secrets are public keys
/// a key of the right shape (from the vectors in `tests/vectors/`).
fn placeholder_secret(kind: Kind) -> &'static str {
    match kind {
        Kind::Discord => crate::receive::discord::PLACEHOLDER_KEY,
        Kind::Sendgrid => crate::receive::sendgrid::PLACEHOLDER_KEY,
        _ => PLACEHOLDER_SECRET,
    }
}

fn load_with(
    path: Option<&Path>,
    prepare: impl FnOnce(RawConfig) -> RawConfig,
) -> Result<Config, ConfigError> {
    let path = path
        .map(Path::to_path_buf)
        .or_else(|| Some(PathBuf::from(SYSTEM_CONFIG)).filter(|p| p.exists()));
    match path {
        Some(path) => {
            let origin = path.display().to_string();
            let text = std::fs::read_to_string(&path).map_err(|e| ConfigError {
                origin: origin.clone(),
                problems: vec![format!("cannot read the file: {e}")],
            })?;
            validate(prepare(parse(&text, &origin)?), origin)
        }
        None => {
            let (raw, disabled) = embedded();
            let mut config = validate(prepare(raw), "embedded default".to_owned())?;
            config.disabled_defaults = disabled;
            Ok(config)
        }
    }
}

fn parse(text: &str, origin: &str) -> Result<RawConfig, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError {
        origin: origin.to_owned(),
        problems: vec![toml_problem(text, &e)],
    })
}

/// A TOML error as `line L, column C: message`. toml's own rendering quotes
/// the offending source line, and serde's message quotes a mistyped string
/// (`secrets = "..."` instead of a list): either may hold a literal secret
/// (found by the `config` fuzz target), so the line is left out and a
/// quoted string is shown as `a string`.
fn toml_problem(text: &str, e: &toml::de::Error) -> String {
    let message = hide_quoted_strings(e.message().trim_end());
    match e.span().and_then(|span| text.get(..span.start)) {
        Some(before) => {
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
            format!("TOML parse error at line {line}, column {column}: {message}")
        }
        None => format!("TOML parse error: {message}"),
    }
}

/// Replaces each `string "..."` (serde's rendering of an unexpected string,
/// Debug-escaped) by `a string`.
fn hide_quoted_strings(message: &str) -> String {
    const QUOTED: &str = "string \"";
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(QUOTED) {
        out.push_str(&rest[..at]);
        out.push_str("a string");
        let tail = &rest[at + QUOTED.len()..];
        let mut end = tail.len();
        let mut chars = tail.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// Parses and validates TOML text.
pub fn from_toml(text: &str, origin: String) -> Result<Config, ConfigError> {
    validate(parse(text, &origin)?, origin)
}

/// The embedded default's sources and the variable holding each secret.
const EMBEDDED_SOURCES: [(Kind, &str); 4] = [
    (Kind::Github, "GITHUB_WEBHOOK_SECRET"),
    (Kind::Stripe, "STRIPE_WEBHOOK_SECRET"),
    (Kind::Shopify, "SHOPIFY_WEBHOOK_SECRET"),
    (Kind::Standard, "STANDARD_WEBHOOK_SECRET"),
];

/// The embedded default: `github`, `stripe`, `shopify` and `standard`
/// sources, each present when its secret variable is set and not empty.
/// Returns the sources left off, with their variables.
pub fn embedded() -> (RawConfig, Vec<(String, String)>) {
    let mut raw = RawConfig::default();
    let mut disabled = Vec::new();
    for (kind, var) in EMBEDDED_SOURCES {
        let name = kind.as_str().to_owned();
        if std::env::var(var).is_ok_and(|v| !v.is_empty()) {
            raw.sources.push(RawSource {
                name,
                kind,
                enabled: true,
                secrets: vec![format!("env:{var}")],
                tolerance: None,
                order_key: Vec::new(),
                max_body_bytes: None,
                hmac: None,
                deliver: RawDestinations::None,
                github_redelivery: None,
                gitlab_redelivery: None,
                stripe_backfill: None,
                allow_ips: Vec::new(),
                public_url: None,
                verify_token: None,
            });
        } else {
            disabled.push((name, var.to_owned()));
        }
    }
    (raw, disabled)
}

/// Checks every field and resolves every secret, reporting all problems.
pub fn validate(raw: RawConfig, origin: String) -> Result<Config, ConfigError> {
    let mut problems = Vec::new();
    let server = &raw.server;
    limits::MAX_BODY_BYTES.check("server", server.max_body_bytes, &mut problems);
    limits::WRITER_QUEUE.check("server", server.writer_queue, &mut problems);
    limits::HEADER_TIMEOUT.check("server", server.header_timeout, &mut problems);
    limits::BODY_TIMEOUT.check("server", server.body_timeout, &mut problems);
    if server.listen == server.admin_listen && server.listen.port() != 0 {
        problems.push("server.admin_listen: must differ from server.listen".to_owned());
    }
    ops::validate(&raw.retention, &raw.backup, &mut problems);
    let admin = admin::validate(&raw.admin, &mut problems);
    let edge = edge::validate(&raw.edge, server, &mut problems);
    let tls = tls::validate(server.tls.as_ref(), &server.database, &mut problems);
    let alerts = alerts::validate(&raw.alerts, &mut problems);

    let mut names = HashSet::new();
    let mut sources = Vec::new();
    for (i, src) in raw.sources.iter().enumerate() {
        let at = format!("sources[{i}] ({:?})", src.name);
        if !valid_name(&src.name) {
            problems.push(format!(
                "{at}.name: use 1-64 characters from a-z, 0-9, '-' and '_' (it becomes the route /hooks/<name>)"
            ));
        }
        if !names.insert(src.name.as_str()) {
            problems.push(format!("{at}.name: another source has this name"));
        }
        if !src.enabled {
            continue;
        }
        if let Some(source) = validate_source(src, server, &at, &mut problems) {
            sources.push(source);
        }
    }

    if problems.is_empty() {
        Ok(Config {
            server: raw.server.clone(),
            admin,
            retention: raw.retention.clone(),
            backup: raw.backup.clone(),
            search: raw.search.clone(),
            edge,
            tls,
            sources,
            alerts,
            origin,
            disabled_defaults: Vec::new(),
            raw,
        })
    } else {
        Err(ConfigError { origin, problems })
    }
}

fn validate_source(
    src: &RawSource,
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
    if src.kind == Kind::Standard {
        for (j, s) in secrets.iter().enumerate() {
            if crate::receive::standard::key_from_secret(s).is_none() {
                problems.push(format!(
                    "{at}.secrets[{j}]: a Standard Webhooks secret is `whsec_` followed by base64"
                ));
            }
        }
    }
    check_public_keys(src.kind, &secrets, at, problems);
    let verify_token = validate_verify_token(src, at, problems);
    let tolerance = src.tolerance.unwrap_or(src.kind.default_tolerance());
    limits::TOLERANCE.check(at, tolerance, problems);
    validate_public_url(src, at, problems);
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
    let hmac = match (&src.hmac, src.kind) {
        (Some(h), Kind::Hmac) => validate_hmac(h, &format!("{at}.hmac"), problems),
        (None, Kind::Hmac) => {
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
    let github_redelivery = match (&src.github_redelivery, src.kind) {
        (Some(g), Kind::Github) => {
            catchup::validate_github(g, &format!("{at}.github_redelivery"), problems)
        }
        (Some(_), _) => {
            problems.push(format!("{at}.github_redelivery: only for kind \"github\""));
            None
        }
        (None, _) => None,
    };
    let gitlab_redelivery = match (&src.gitlab_redelivery, src.kind) {
        (Some(g), Kind::Gitlab) => {
            catchup::validate_gitlab(g, &format!("{at}.gitlab_redelivery"), problems)
        }
        (Some(_), _) => {
            problems.push(format!("{at}.gitlab_redelivery: only for kind \"gitlab\""));
            None
        }
        (None, _) => None,
    };
    let stripe_backfill = match (&src.stripe_backfill, src.kind) {
        (Some(s), Kind::Stripe) => {
            catchup::validate_stripe(s, &format!("{at}.stripe_backfill"), problems)
        }
        (Some(_), _) => {
            problems.push(format!("{at}.stripe_backfill: only for kind \"stripe\""));
            None
        }
        (None, _) => None,
    };
    let allow_ips = edge::validate_allow_ips(&src.allow_ips, at, problems);
    (problems.len() == before).then(|| SourceConfig {
        name: src.name.clone(),
        kind: src.kind,
        secrets,
        tolerance,
        order_key: src.order_key.clone(),
        max_body_bytes: src.max_body_bytes.unwrap_or(server.max_body_bytes),
        hmac,
        destinations: destinations.expect("no problems means the destinations were built"),
        github_redelivery,
        gitlab_redelivery,
        stripe_backfill,
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
fn validate_public_url(src: &RawSource, at: &str, problems: &mut Vec<String>) {
    let key = format!("{at}.public_url");
    let Some(raw) = &src.public_url else {
        if src.kind.signs_url() {
            problems.push(format!(
                "{key}: kind {:?} signs the URL it calls: set public_url to the URL exactly as \
                 entered in the provider's console (e.g. \"https://hooks.example.com/hooks/{}\")",
                src.kind.as_str(),
                src.name
            ));
        }
        return;
    };
    if !src.kind.signs_url() {
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

/// Discord and SendGrid take public keys in `secrets`: each must decode
/// now, not at the first delivery.
fn check_public_keys(kind: Kind, secrets: &[Secret], at: &str, problems: &mut Vec<String>) {
    let check: fn(&Secret) -> Result<(), String> = match kind {
        Kind::Discord => |s| crate::receive::discord::parse_public_key(s).map(drop),
        Kind::Sendgrid => |s| crate::receive::sendgrid::parse_public_key(s).map(drop),
        _ => return,
    };
    for (j, s) in secrets.iter().enumerate() {
        if let Err(why) = check(s) {
            problems.push(format!("{at}.secrets[{j}]: {why}"));
        }
    }
}

/// `verify_token`: required for kind `meta`, refused elsewhere.
fn validate_verify_token(src: &RawSource, at: &str, problems: &mut Vec<String>) -> Option<Secret> {
    match (&src.verify_token, src.kind) {
        (Some(reference), Kind::Meta) => match secret::resolve(reference) {
            Ok(token) => Some(token),
            Err(why) => {
                problems.push(format!(
                    "{at}.verify_token ({}): {why}",
                    secret::describe(reference)
                ));
                None
            }
        },
        (None, Kind::Meta) => {
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

fn validate_hmac(h: &RawHmac, at: &str, problems: &mut Vec<String>) -> Option<HmacConfig> {
    let before = problems.len();
    let header_ok = |name: &str| axum::http::HeaderName::from_bytes(name.as_bytes()).is_ok();
    for (key, name) in [
        ("header", Some(&h.header)),
        ("timestamp_header", h.timestamp_header.as_ref()),
        ("id_header", h.id_header.as_ref()),
        ("event_type_header", h.event_type_header.as_ref()),
    ] {
        if let Some(name) = name
            && !header_ok(name)
        {
            problems.push(format!("{at}.{key}: {name:?} is not a valid header name"));
        }
    }
    for (key, pointer) in [
        ("id_pointer", h.id_pointer.as_ref()),
        ("event_type_pointer", h.event_type_pointer.as_ref()),
    ] {
        if let Some(p) = pointer
            && !p.starts_with('/')
        {
            problems.push(format!("{at}.{key}: a JSON pointer starts with '/'"));
        }
    }
    let id = match (&h.id_header, &h.id_pointer) {
        (Some(_), Some(_)) => {
            problems.push(format!("{at}: set id_header or id_pointer, not both"));
            IdFrom::BodyHash
        }
        (Some(name), None) => IdFrom::Field(Field::Header(name.to_ascii_lowercase())),
        (None, Some(p)) => IdFrom::Field(Field::Pointer(p.clone())),
        (None, None) => IdFrom::BodyHash,
    };
    let event_type = match (&h.event_type_header, &h.event_type_pointer) {
        (Some(_), Some(_)) => {
            problems.push(format!(
                "{at}: set event_type_header or event_type_pointer, not both"
            ));
            None
        }
        (Some(name), None) => Some(Field::Header(name.to_ascii_lowercase())),
        (None, Some(p)) => Some(Field::Pointer(p.clone())),
        (None, None) => None,
    };
    let template = h.signed_payload.clone().unwrap_or_else(|| {
        if h.timestamp_header.is_some() {
            "{timestamp}.{body}".to_owned()
        } else {
            "{body}".to_owned()
        }
    });
    let signed_payload = match parse_template(&template) {
        Ok(parts) => {
            let signs_timestamp = parts.contains(&PayloadPart::Timestamp);
            if signs_timestamp && h.timestamp_header.is_none() {
                problems.push(format!(
                    "{at}.signed_payload: uses {{timestamp}} but no timestamp_header is set"
                ));
            }
            // A timestamp that is checked but not signed can be replaced
            // by anyone replaying a captured request: the window would
            // only look like replay protection.
            if !signs_timestamp && h.timestamp_header.is_some() {
                problems.push(format!(
                    "{at}.signed_payload: must include {{timestamp}} when timestamp_header is set, \
                     or a replayed request passes with a fresh timestamp (leave timestamp_header \
                     out if the sender does not sign one)"
                ));
            }
            parts
        }
        Err(why) => {
            problems.push(format!("{at}.signed_payload: {why}"));
            Vec::new()
        }
    };
    (problems.len() == before).then(|| HmacConfig {
        header: h.header.to_ascii_lowercase(),
        prefix: h.prefix.clone(),
        encoding: h.encoding,
        timestamp_header: h.timestamp_header.as_ref().map(|s| s.to_ascii_lowercase()),
        signed_payload,
        id,
        event_type,
    })
}

/// Splits `"{timestamp}.{body}"` into parts. `{body}` must appear exactly once.
fn parse_template(template: &str) -> Result<Vec<PayloadPart>, String> {
    let mut parts = Vec::new();
    let mut rest = template;
    let mut literal = String::new();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("{body}") {
            push_literal(&mut parts, &mut literal);
            parts.push(PayloadPart::Body);
            rest = r;
        } else if let Some(r) = rest.strip_prefix("{timestamp}") {
            push_literal(&mut parts, &mut literal);
            parts.push(PayloadPart::Timestamp);
            rest = r;
        } else if rest.starts_with('{') {
            return Err("only the placeholders {body} and {timestamp} are known".to_owned());
        } else {
            let c = rest.chars().next().expect("rest is not empty");
            literal.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    push_literal(&mut parts, &mut literal);
    if parts.iter().filter(|p| **p == PayloadPart::Body).count() != 1 {
        return Err("must contain {body} exactly once".to_owned());
    }
    Ok(parts)
}

fn push_literal(parts: &mut Vec<PayloadPart>, literal: &mut String) {
    if !literal.is_empty() {
        parts.push(PayloadPart::Literal(std::mem::take(literal).into_bytes()));
    }
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

impl Config {
    /// The environment variables that hold hookbox's secrets, for programs
    /// it starts to go without: every `env:` reference in the config
    /// (disabled sources' too) and the embedded default's variables,
    /// whichever config is in use.
    pub fn secret_env(&self) -> Vec<String> {
        let raw = &self.raw;
        let references =
            raw.sources
                .iter()
                .flat_map(|s| {
                    let redelivery = s.github_redelivery.as_ref();
                    s.secrets
                        .iter()
                        .map(String::as_str)
                        .chain(s.deliver.iter().filter_map(|d| d.signing_secret.as_deref()))
                        .chain(redelivery.and_then(|g| g.token.as_deref()))
                        .chain(redelivery.and_then(|g| g.private_key.as_deref()))
                        .chain(
                            s.gitlab_redelivery
                                .as_ref()
                                .and_then(|g| g.token.as_deref()),
                        )
                        .chain(s.stripe_backfill.as_ref().map(|b| b.api_key.as_str()))
                        .chain(s.verify_token.as_deref())
                })
                .chain(raw.admin.token.as_deref())
                .chain(raw.alerts.iter().flat_map(|a| {
                    std::iter::once(a.url.as_str()).chain(a.signing_secret.as_deref())
                }));
        let mut names: Vec<String> = references
            .filter_map(|r| r.strip_prefix("env:"))
            .chain(EMBEDDED_SOURCES.iter().map(|(_, var)| *var))
            .map(str::to_owned)
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// The effective config as TOML, every literal secret replaced by
    /// `[redacted]` (references like `env:NAME` are shown: they are not secret).
    pub fn redacted_toml(&self) -> String {
        let mut raw = self.raw.clone();
        admin::redact(&mut raw.admin);
        raw.alerts.iter_mut().for_each(alerts::redact);
        for src in &mut raw.sources {
            for s in &mut src.secrets {
                *s = secret::describe(s);
            }
            for d in src.deliver.iter_mut() {
                deliver::redact(d);
            }
            if let Some(g) = &mut src.github_redelivery {
                catchup::redact_github(g);
            }
            if let Some(g) = &mut src.gitlab_redelivery {
                catchup::redact_gitlab(g);
            }
            if let Some(s) = &mut src.stripe_backfill {
                catchup::redact_stripe(s);
            }
            if let Some(token) = &mut src.verify_token {
                *token = secret::describe(token);
            }
        }
        toml::to_string_pretty(&raw).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
    }

    pub fn source(&self, name: &str) -> Option<&SourceConfig> {
        self.sources.iter().find(|s| s.name == name)
    }
}

#[cfg(test)]
mod tests;
