//! Secrets and the references that name them.
//!
//! A secret field in the config holds a reference: `env:NAME`, `file:PATH`,
//! `cred:NAME` (a systemd credential, read from `$CREDENTIALS_DIRECTORY`),
//! or a literal. References are resolved once at load; the resolved value
//! lives in [`Secret`], whose `Debug` and `Display` print `[redacted]` so it
//! cannot leak through a log line, an error or a panic message.
//!
//! A Standard Webhooks `whsec_` secret is an encoded key, decoded here
//! ([`Secret::standard_key`]) because hookbox also signs its own deliveries
//! and alerts with one, which validation checks. The keys of provider kinds
//! (Discord's and SendGrid's public keys) are decoded by their provider
//! files in `crate::ingress::receive`, which declare the check validation runs.

use std::fmt;
use std::path::Path;

use base64::Engine as _;

/// A resolved secret value. Read it with [`Secret::expose`], which makes
/// every use easy to find.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The HMAC key of a Standard Webhooks secret: base64 after an optional
    /// `whsec_`. `None` when that is not base64 or decodes to nothing; config
    /// validation reports such secrets, so the verifier can skip them.
    pub fn standard_key(&self) -> Option<Vec<u8>> {
        let encoded = self.0.strip_prefix("whsec_").unwrap_or(&self.0);
        decode_base64(encoded).filter(|key| !key.is_empty())
    }
}

/// Standard base64 with padding, strictly, as every provider here encodes
/// keys.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// How a reference is described in redacted output: the reference itself
/// for `env:`/`file:`/`cred:`, and `[redacted]` for a literal.
pub fn describe(reference: &str) -> String {
    if ["env:", "file:", "cred:"]
        .iter()
        .any(|p| reference.starts_with(p))
    {
        reference.to_owned()
    } else {
        "[redacted]".to_owned()
    }
}

/// Resolves a reference. The error names the reference's kind and target
/// (an env variable name, a path) but never a value.
pub fn resolve(reference: &str) -> Result<Secret, String> {
    let value = if let Some(name) = reference.strip_prefix("env:") {
        std::env::var(name).map_err(|_| format!("environment variable {name} is not set"))?
    } else if let Some(path) = reference.strip_prefix("file:") {
        read_secret_file(Path::new(path))?
    } else if let Some(name) = reference.strip_prefix("cred:") {
        let dir = std::env::var_os("CREDENTIALS_DIRECTORY").ok_or_else(|| {
            format!("credential {name}: $CREDENTIALS_DIRECTORY is not set (use LoadCredential= in the unit)")
        })?;
        if name.is_empty() || name.contains('/') {
            return Err(format!("credential name {name:?} is not a plain file name"));
        }
        let value = read_secret_file(&Path::new(&dir).join(name))?;
        if value.is_empty() {
            // The Debian package creates the credential files the unit
            // names empty, for the admin to fill in: say which one.
            return Err(format!(
                "credential {name} is empty: write the secret to the file the unit's \
                 LoadCredential={name}: line names (/etc/hookbox/credentials/{name} as shipped)"
            ));
        }
        value
    } else {
        reference.to_owned()
    };
    if value.is_empty() {
        return Err("the secret is empty".to_owned());
    }
    Ok(Secret(value))
}

/// Reads a secret file, dropping one trailing newline (editors add it; no
/// provider secret ends in one).
fn read_secret_file(path: &Path) -> Result<String, String> {
    let mut text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_never_show_the_value() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?} {s}"), "[redacted] [redacted]");
    }

    #[test]
    fn literals_are_redacted_and_references_shown() {
        assert_eq!(describe("hunter2"), "[redacted]");
        assert_eq!(describe("env:GITHUB_SECRET"), "env:GITHUB_SECRET");
    }

    #[test]
    fn file_references_drop_one_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        std::fs::write(&path, "abc\n").unwrap();
        let s = resolve(&format!("file:{}", path.display())).unwrap();
        assert_eq!(s.expose(), "abc");
    }

    #[test]
    fn empty_and_missing_secrets_are_errors_without_values() {
        assert!(resolve("").is_err());
        let err = resolve("env:HOOKBOX_TEST_SURELY_UNSET_VAR").unwrap_err();
        assert!(err.contains("HOOKBOX_TEST_SURELY_UNSET_VAR"));
        assert!(resolve("file:/nonexistent/secret").is_err());
    }

    #[test]
    fn a_standard_key_is_base64_after_an_optional_prefix() {
        let with = Secret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").standard_key();
        assert_eq!(with.as_ref().map(Vec::len), Some(24));
        assert_eq!(
            Secret::new("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").standard_key(),
            with
        );
        assert_eq!(Secret::new("whsec_").standard_key(), None);
        assert_eq!(Secret::new("whsec_not base64!").standard_key(), None);
    }
}
