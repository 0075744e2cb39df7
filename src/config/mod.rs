//! Configuration: TOML in, a validated [`Config`] with resolved secrets out.
//!
//! Loading has two stages. Serde reads the file into the `Raw*` types
//! (`deny_unknown_fields`, so a typo is an error and not a silently ignored
//! key). [`validate()`] then checks every field, resolves every secret
//! reference and collects *all* problems, each naming its key, before
//! anything binds a port or opens the database. The `Raw*` types are also
//! what `hookbox check` prints, with secret references redacted.
//!
//! Without a file, hookbox runs on the embedded default (see [`embedded`]):
//! the four common providers, each enabled when its secret is in the
//! environment.
//!
//! This module holds the top-level types ([`RawConfig`], [`Config`],
//! [`ConfigError`]); each table has a file of its own, which owns its raw
//! and validated types and its checks: `server.rs`, `source.rs` (with
//! the generic scheme in `hmac.rs`, and `kind.rs`: what a provider kind
//! tells validation, handed in by `crate::ingress::receive`'s registry), `deliver.rs`,
//! `catchup.rs`, `edge.rs`, `tls.rs`, `admin.rs`, `alerts.rs`, `ops.rs`; the
//! destination kinds are a table (`destinations.rs`), the broker kinds'
//! tables each a file of [`broker`].
//! `load.rs` finds and parses the file, `validate.rs` checks the whole,
//! `redact.rs` keeps secrets out of what is printed or passed on.
//! Config is a leaf of the crate: it uses no other module of hookbox, so
//! everything may depend on it.

mod admin;
mod alerts;
pub mod argv;
pub mod broker;
mod catchup;
pub mod cert;
mod deliver;
mod destinations;
mod duration;
mod edge;
mod hmac;
mod kind;
pub mod limits;
mod load;
mod ops;
pub mod placeholders;
mod redact;
pub mod route;
mod secret;
mod server;
mod source;
mod target_url;
mod tls;
pub mod transform;
pub mod url_options;
mod validate;

use std::fmt;

use serde::{Deserialize, Serialize};

pub use admin::{AdminConfig, RawAdmin};
pub use alerts::{AlertConfig, Condition, Format, RawAlert, SigningKey};
pub use catchup::{
    AppId, GithubRedeliveryConfig, GitlabParent, GitlabRedeliveryConfig, HookTarget, Namespace,
    PaddleReplayConfig, RawGithubRedelivery, RawGitlabRedelivery, RawPaddleReplay,
    RawSquareBackfill, RawStripeBackfill, SquareBackfillConfig, StripeBackfillConfig,
};
pub use deliver::{DEFAULT_NAME, DeliverConfig, Destination, RawDeliver, RawDestinations};
pub use edge::{AllowIps, EdgeConfig, ForwardedHeader, NamedSet, RawEdge, parse_net};
pub use hmac::{Encoding, Field, HmacConfig, IdFrom, PayloadPart, RawHmac};
pub use kind::{DEFAULT_TOLERANCE, Kind, KindFacts, Kinds, PLACEHOLDER_SECRET, any_secret};
pub use load::{embedded, from_toml, load, load_without_secrets};
pub use ops::{BackupConfig, RetentionConfig, SearchConfig};
pub use secret::{Secret, resolve as resolve_secret};
pub use server::{DEFAULT_MAX_BODY_BYTES, Durability, RawServer};
pub use source::{RawSource, SourceConfig};
pub use target_url::TargetUrl;
pub use tls::{AcmeConfig, RawAcme, RawTls, TlsConfig, TlsFiles};
pub use url_options::{Method, UrlOptions};
pub use validate::validate;

/// Where the config is looked for when `--config` is not given.
pub const SYSTEM_CONFIG: &str = "/etc/hookbox/hookbox.toml";

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

impl Config {
    pub fn source(&self, name: &str) -> Option<&SourceConfig> {
        self.sources.iter().find(|s| s.name == name)
    }

    /// What `hookbox check` warns of in a valid config: settings that may
    /// not do what their user meant (a url destination sent unsigned).
    pub fn warnings(&self) -> Vec<String> {
        self.raw
            .sources
            .iter()
            .enumerate()
            .flat_map(|(i, s)| {
                deliver::warnings(&s.deliver, &format!("sources[{i}] ({:?})", s.name))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
