//! Where the config comes from: the file named by `--config`, else
//! [`SYSTEM_CONFIG`], else the embedded default built from the
//! environment; and the TOML parse, whose errors must not quote the file
//! (it may hold literal secrets).
//!
//! Every path ends in [`super::validate()`]; the variants differ only in
//! what they feed it.

use std::path::{Path, PathBuf};

use super::kind::PLACEHOLDER_SECRET;
use super::{
    Config, ConfigError, Kinds, RawConfig, RawDestinations, RawSource, SYSTEM_CONFIG, validate,
};

/// Loads the config: `path` if given, else [`SYSTEM_CONFIG`] when it
/// exists, else the embedded default. Sources may name any of `kinds`.
pub fn load(path: Option<&Path>, kinds: &dyn Kinds) -> Result<Config, ConfigError> {
    load_with(path, kinds, |raw| raw)
}

/// A url destination's URL when its secret cannot be read: what a
/// command that sends nothing shows (`hookbox try`).
const PLACEHOLDER_URL: &str = "https://url-secret-not-read.invalid/";

/// [`load`] for the commands that only read or copy the database
/// (`events`, `backup`, `purge`, `replay`, `healthcheck`): secrets are not
/// resolved but stood in for, and catch-up, TLS and the admin token, which
/// they do not use, are left out. So `sudo hookbox events` works outside
/// the unit, without `$CREDENTIALS_DIRECTORY` or the key files.
pub fn load_without_secrets(path: Option<&Path>, kinds: &dyn Kinds) -> Result<Config, ConfigError> {
    load_with(path, kinds, |mut raw| {
        raw.admin.token = None;
        raw.server.tls = None;
        // Alerts are only sent by `serve` and `hookbox alerts test`.
        raw.alerts.clear();
        for source in &mut raw.sources {
            // An unknown kind keeps the general placeholder; validation
            // names the kind.
            let placeholder = kinds
                .find(&source.kind)
                .map_or(PLACEHOLDER_SECRET, |k| k.facts().placeholder_secret);
            for secret in &mut source.secrets {
                *secret = placeholder.to_owned();
            }
            if source.verify_token.is_some() {
                source.verify_token = Some(PLACEHOLDER_SECRET.to_owned());
            }
            for deliver in source.deliver.iter_mut() {
                if deliver.signing_secret.is_some() {
                    deliver.signing_secret = Some(PLACEHOLDER_SECRET.to_owned());
                }
                if let Some(pull) = &mut deliver.pull {
                    pull.token = PLACEHOLDER_SECRET.to_owned();
                }
                for value in deliver.headers.values_mut() {
                    *value = PLACEHOLDER_SECRET.to_owned();
                }
                // The URL is kept when it can be read, for `hookbox try`
                // to name its host.
                if let Some(url) = &mut deliver.url
                    && super::secret::resolve(url).is_err()
                {
                    *url = PLACEHOLDER_URL.to_owned();
                }
            }
            source.github_redelivery = None;
            source.gitlab_redelivery = None;
            source.stripe_backfill = None;
            source.paddle_replay = None;
            source.square_backfill = None;
        }
        raw
    })
}

fn load_with(
    path: Option<&Path>,
    kinds: &dyn Kinds,
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
            validate(prepare(parse(&text, &origin)?), origin, kinds)
        }
        None => {
            let (raw, disabled) = embedded();
            let mut config = validate(prepare(raw), "embedded default".to_owned(), kinds)?;
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
pub(super) fn hide_quoted_strings(message: &str) -> String {
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

/// Parses and validates TOML text; sources may name any of `kinds`.
pub fn from_toml(text: &str, origin: String, kinds: &dyn Kinds) -> Result<Config, ConfigError> {
    validate(parse(text, &origin)?, origin, kinds)
}

/// The embedded default's sources and the variable holding each secret.
/// Each source is named after its kind.
pub(super) const EMBEDDED_SOURCES: [(&str, &str); 4] = [
    ("github", "GITHUB_WEBHOOK_SECRET"),
    ("stripe", "STRIPE_WEBHOOK_SECRET"),
    ("shopify", "SHOPIFY_WEBHOOK_SECRET"),
    ("standard", "STANDARD_WEBHOOK_SECRET"),
];

/// The embedded default: `github`, `stripe`, `shopify` and `standard`
/// sources, each present when its secret variable is set and not empty.
/// Returns the sources left off, with their variables.
pub fn embedded() -> (RawConfig, Vec<(String, String)>) {
    let mut raw = RawConfig::default();
    let mut disabled = Vec::new();
    for (kind, var) in EMBEDDED_SOURCES {
        let name = kind.to_owned();
        if std::env::var(var).is_ok_and(|v| !v.is_empty()) {
            raw.sources.push(RawSource {
                name,
                kind: kind.to_owned(),
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
                paddle_replay: None,
                square_backfill: None,
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
