//! What of the config is secret, for the places that must leave it out:
//! the environment of programs hookbox starts ([`Config::secret_env`]) and
//! the effective config `hookbox check` prints ([`Config::redacted_toml`]).
//!
//! Both read one list, [`RawConfig::secrets_mut`], every secret reference
//! of the file: a secret field added to the config is added there once,
//! and neither place can forget it (as `secret_env` once forgot the pull
//! tokens while redaction had them). A unit test walks every text field
//! of every config type and fails on one that is neither in that list nor
//! named as not secret.

use super::load::EMBEDDED_SOURCES;
use super::{Config, RawConfig, secret, target_url};

impl Config {
    /// The environment variables that hold hookbox's secrets, for programs
    /// it starts to go without: every `env:` reference in the config
    /// (disabled sources' too) and the embedded default's variables,
    /// whichever config is in use.
    pub fn secret_env(&self) -> Vec<String> {
        self.raw.secret_env()
    }

    /// The effective config as TOML, every literal secret replaced by
    /// `[redacted]` (references like `env:NAME` are shown: they are not
    /// secret), and a literal destination URL shown as scheme, host and
    /// port only.
    pub fn redacted_toml(&self) -> String {
        self.raw.redacted_toml()
    }
}

impl RawConfig {
    /// Every secret reference of the config (disabled sources' too), each
    /// `env:NAME`, `file:PATH`, `cred:NAME` or a literal. Public for the
    /// config fuzz target, which swaps every literal secret for another.
    pub fn secrets_mut(&mut self) -> Vec<&mut String> {
        let mut found: Vec<&mut String> = Vec::new();
        found.extend(self.admin.token.as_mut());
        for alert in &mut self.alerts {
            found.push(&mut alert.url);
            found.extend(alert.signing_secret.as_mut());
        }
        for source in &mut self.sources {
            found.extend(source.secrets.iter_mut());
            found.extend(source.verify_token.as_mut());
            for deliver in source.deliver.iter_mut() {
                found.extend(deliver.url.as_mut());
                found.extend(deliver.signing_secret.as_mut());
                found.extend(deliver.pull.as_mut().map(|p| &mut p.token));
                found.extend(deliver.nats.iter_mut().flat_map(|k| k.secrets_mut()));
                found.extend(deliver.redis.iter_mut().flat_map(|k| k.secrets_mut()));
                found.extend(deliver.amqp.iter_mut().flat_map(|k| k.secrets_mut()));
                found.extend(deliver.mqtt.iter_mut().flat_map(|k| k.secrets_mut()));
                found.extend(deliver.headers.values_mut());
            }
            if let Some(github) = &mut source.github_redelivery {
                found.extend(github.token.as_mut());
                found.extend(github.private_key.as_mut());
            }
            if let Some(gitlab) = &mut source.gitlab_redelivery {
                found.extend(gitlab.token.as_mut());
            }
            if let Some(stripe) = &mut source.stripe_backfill {
                found.push(&mut stripe.api_key);
            }
            if let Some(paddle) = &mut source.paddle_replay {
                found.push(&mut paddle.api_key);
            }
            if let Some(square) = &mut source.square_backfill {
                found.push(&mut square.access_token);
            }
        }
        found
    }

    /// [`Config::secret_env`], for the file as written.
    pub(super) fn secret_env(&self) -> Vec<String> {
        let mut raw = self.clone();
        let mut names: Vec<String> = raw
            .secrets_mut()
            .into_iter()
            .filter_map(|r| r.strip_prefix("env:"))
            .chain(EMBEDDED_SOURCES.iter().map(|(_, var)| *var))
            .map(str::to_owned)
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// [`Config::redacted_toml`], for the file as written.
    pub(super) fn redacted_toml(&self) -> String {
        let mut raw = self.clone();
        // A literal URL is shown in part, not as `[redacted]`.
        let urls: Vec<Option<String>> = raw
            .sources
            .iter()
            .flat_map(|s| s.deliver.iter())
            .map(|d| d.url.as_deref().map(target_url::shown_reference))
            .collect();
        for reference in raw.secrets_mut() {
            *reference = secret::describe(reference);
        }
        let delivers = raw.sources.iter_mut().flat_map(|s| s.deliver.iter_mut());
        for (deliver, url) in delivers.zip(urls) {
            deliver.url = url;
        }
        toml::to_string_pretty(&raw).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
    }
}
