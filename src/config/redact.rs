//! What of the config is secret, for the two places that must leave it
//! out: the environment of programs hookbox starts ([`Config::secret_env`])
//! and the effective config `hookbox check` prints
//! ([`Config::redacted_toml`]).

use super::load::EMBEDDED_SOURCES;
use super::{Config, admin, alerts, catchup, deliver, secret};

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
}
