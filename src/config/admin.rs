//! `[admin]`: the bearer token that guards the admin listener.
//!
//! `token` is a secret reference (`env:`, `file:`, `cred:` or a literal).
//! Left unset, hookbox generates a token at first start and keeps it next
//! to the database (see `crate::service::admin::token`); this module only resolves
//! a configured one.

use serde::{Deserialize, Serialize};

use super::secret::{self, Secret};

/// Shortest token accepted from the config: a guessable token on a port
/// that can replay events is worse than none.
const MIN_TOKEN_LEN: usize = 16;

/// `[admin]` as written. `Debug` is written by hand: `token` may be a literal.
#[derive(Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawAdmin {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl std::fmt::Debug for RawAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawAdmin")
            .field("token", &self.token.as_deref().map(secret::describe))
            .finish()
    }
}

/// The validated `[admin]` table.
#[derive(Debug, Clone, Default)]
pub struct AdminConfig {
    /// `None`: use (or create) the generated token file.
    pub token: Option<Secret>,
}

/// Resolves the token reference, pushing a problem when it does not resolve
/// or is too short.
pub fn validate(raw: &RawAdmin, problems: &mut Vec<String>) -> AdminConfig {
    let Some(reference) = &raw.token else {
        return AdminConfig::default();
    };
    match secret::resolve(reference) {
        Ok(token) if token.expose().len() < MIN_TOKEN_LEN => {
            problems.push(format!(
                "admin.token ({}): use at least {MIN_TOKEN_LEN} characters, or leave it unset to have one generated",
                secret::describe(reference)
            ));
            AdminConfig::default()
        }
        Ok(token) => AdminConfig { token: Some(token) },
        Err(why) => {
            problems.push(format!(
                "admin.token ({}): {why}",
                secret::describe(reference)
            ));
            AdminConfig::default()
        }
    }
}

/// Replaces a literal token with `[redacted]` for `hookbox check`.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unset_token_is_fine_and_a_short_or_missing_one_is_a_problem() {
        let mut problems = Vec::new();
        assert!(
            validate(&RawAdmin::default(), &mut problems)
                .token
                .is_none()
        );
        assert!(problems.is_empty());

        let short = RawAdmin {
            token: Some("short".into()),
        };
        validate(&short, &mut problems);
        let missing = RawAdmin {
            token: Some("env:HOOKBOX_TEST_SURELY_UNSET_ADMIN_TOKEN".into()),
        };
        validate(&missing, &mut problems);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems.iter().all(|p| p.starts_with("admin.token")));
        assert!(
            !problems[0].contains("short"),
            "the literal leaked: {problems:?}"
        );
    }

    #[test]
    fn a_literal_token_resolves_and_is_hidden_from_debug() {
        let mut problems = Vec::new();
        let raw = RawAdmin {
            token: Some("a-long-enough-admin-token".into()),
        };
        let cfg = validate(&raw, &mut problems);
        assert_eq!(
            cfg.token.as_ref().map(Secret::expose),
            Some("a-long-enough-admin-token")
        );
        assert!(!format!("{raw:?}").contains("a-long-enough"));
    }
}
