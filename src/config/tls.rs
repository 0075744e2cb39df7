//! `[server.tls]`: the public listener's certificate, either from files
//! (`cert`, `key`) or obtained by hookbox itself over ACME
//! (`[server.tls.acme]`).
//!
//! Validation loads a file pair ([`super::cert::load`]), so a missing file, an
//! unreadable key or a key that belongs to another certificate stops
//! `hookbox check` and start-up with the path named. ACME settings are
//! checked for shape only: whether the directory answers is a run-time
//! matter, retried with backoff.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{duration, limits};

/// Let's Encrypt's production directory: the default.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";
/// Let's Encrypt's staging directory (`staging = true`): untrusted
/// certificates, generous rate limits, for trying a setup out.
pub const LETS_ENCRYPT_STAGING: &str = "https://acme-staging-v02.api.letsencrypt.org/directory";

/// `[server.tls]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    /// PEM certificate chain, leaf first (certbot's `fullchain.pem`).
    pub cert: Option<PathBuf>,
    /// PEM private key: PKCS#8, PKCS#1 (RSA) or SEC1 (EC).
    pub key: Option<PathBuf>,
    /// How often both files are checked for a change; `0s` leaves
    /// reloading to SIGHUP alone.
    #[serde(default = "default_watch_interval", with = "duration")]
    pub watch_interval: Duration,
    /// Obtain and renew the certificate over ACME instead of reading files.
    pub acme: Option<RawAcme>,
}

fn default_watch_interval() -> Duration {
    Duration::from_secs(5)
}

/// `[server.tls.acme]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawAcme {
    /// The names the certificate covers; each must resolve to this host.
    pub domains: Vec<String>,
    /// Where the CA may write about the account (expiry, policy changes):
    /// `mailto:` addresses; a bare address gets `mailto:` put in front.
    #[serde(default)]
    pub contact: Vec<String>,
    /// The ACME directory URL; Let's Encrypt's production one by default.
    pub directory: Option<String>,
    /// Use Let's Encrypt's staging directory.
    #[serde(default)]
    pub staging: bool,
    /// A PEM CA certificate to trust for the directory's own HTTPS, for a
    /// private ACME server (step-ca, pebble); public CAs need none.
    pub directory_ca: Option<PathBuf>,
    /// Where the account key and certificates are kept; `acme/` next to
    /// the database by default.
    pub cache_dir: Option<PathBuf>,
}

/// The validated TLS settings.
#[derive(Debug, Clone)]
pub enum TlsConfig {
    Files(TlsFiles),
    Acme(AcmeConfig),
}

/// A certificate and key on disk, reloaded when they change.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub watch_interval: Duration,
}

/// A certificate hookbox obtains and renews itself.
#[derive(Debug, Clone)]
pub struct AcmeConfig {
    /// Lowercase, deduplicated, in the order written.
    pub domains: Vec<String>,
    /// Each a `mailto:` URL.
    pub contact: Vec<String>,
    pub directory: String,
    pub directory_ca: Option<PathBuf>,
    pub cache_dir: PathBuf,
}

pub fn validate(
    tls: Option<&RawTls>,
    database: &Path,
    problems: &mut Vec<String>,
) -> Option<TlsConfig> {
    let tls = tls?;
    let before = problems.len();
    limits::TLS_WATCH_INTERVAL.check("server.tls", tls.watch_interval, problems);
    let config = match (&tls.cert, &tls.key, &tls.acme) {
        (Some(cert), Some(key), None) => files(cert, key, tls.watch_interval, problems),
        (None, None, Some(acme)) => acme_config(acme, database, problems),
        (_, _, Some(_)) => {
            problems.push(
                "server.tls: set either cert and key, or [server.tls.acme], not both".to_owned(),
            );
            None
        }
        (Some(_), None, None) => {
            problems.push("server.tls.key: required with server.tls.cert".to_owned());
            None
        }
        (None, Some(_), None) => {
            problems.push("server.tls.cert: required with server.tls.key".to_owned());
            None
        }
        (None, None, None) => {
            problems.push("server.tls: set cert and key, or [server.tls.acme]".to_owned());
            None
        }
    };
    config.filter(|_| problems.len() == before)
}

fn files(
    cert: &Path,
    key: &Path,
    watch_interval: Duration,
    problems: &mut Vec<String>,
) -> Option<TlsConfig> {
    if !watch_interval.is_zero() && watch_interval < Duration::from_secs(1) {
        problems.push("server.tls.watch_interval: at least 1s, or 0s for SIGHUP only".to_owned());
    }
    if let Err(e) = super::cert::load(cert, key) {
        problems.push(format!("server.tls: {e}"));
    }
    Some(TlsConfig::Files(TlsFiles {
        cert: cert.to_owned(),
        key: key.to_owned(),
        watch_interval,
    }))
}

fn acme_config(acme: &RawAcme, database: &Path, problems: &mut Vec<String>) -> Option<TlsConfig> {
    let mut domains: Vec<String> = Vec::new();
    for name in &acme.domains {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        match domain_problem(&name) {
            Some(why) => problems.push(format!("server.tls.acme.domains: {name:?} {why}")),
            None if !domains.contains(&name) => domains.push(name),
            None => {}
        }
    }
    if acme.domains.is_empty() {
        problems.push("server.tls.acme.domains: name at least one domain".to_owned());
    }
    let contact = acme
        .contact
        .iter()
        .map(|c| {
            if c.contains(':') {
                c.clone()
            } else {
                format!("mailto:{c}")
            }
        })
        .collect::<Vec<_>>();
    for c in &contact {
        let address = c.strip_prefix("mailto:").unwrap_or_default();
        if !address.contains('@') || address.contains(char::is_whitespace) {
            problems.push(format!(
                "server.tls.acme.contact: {c:?} is not a mailto: address"
            ));
        }
    }
    let directory = match (&acme.directory, acme.staging) {
        (Some(_), true) => {
            problems.push("server.tls.acme: set directory or staging = true, not both".to_owned());
            String::new()
        }
        (Some(url), false) => {
            if !url.starts_with("https://") {
                problems.push(format!(
                    "server.tls.acme.directory: {url:?} must be an https:// URL"
                ));
            }
            url.clone()
        }
        (None, true) => LETS_ENCRYPT_STAGING.to_owned(),
        (None, false) => LETS_ENCRYPT.to_owned(),
    };
    if let Some(ca) = &acme.directory_ca
        && let Err(why) = pem_certificates(ca)
    {
        problems.push(format!(
            "server.tls.acme.directory_ca: {}: {why}",
            ca.display()
        ));
    }
    let cache_dir = acme.cache_dir.clone().unwrap_or_else(|| {
        database
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .join("acme")
    });
    Some(TlsConfig::Acme(AcmeConfig {
        domains,
        contact,
        directory,
        directory_ca: acme.directory_ca.clone(),
        cache_dir,
    }))
}

/// Checks that `path` holds at least one PEM certificate.
fn pem_certificates(path: &Path) -> Result<(), String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let pem = std::fs::read(path).map_err(|e| e.to_string())?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not PEM certificates ({e})"))?;
    if certs.is_empty() {
        return Err("no PEM certificate in the file".to_owned());
    }
    Ok(())
}

/// Why `name` cannot be in a TLS-ALPN-01 certificate, if it cannot.
fn domain_problem(name: &str) -> Option<&'static str> {
    if name.starts_with("*.") {
        return Some(
            "is a wildcard, which TLS-ALPN-01 cannot validate (use a reverse proxy with DNS-01)",
        );
    }
    if name.parse::<std::net::IpAddr>().is_ok() {
        return Some("is an IP address; name a domain that resolves to this host");
    }
    let labels_ok = name.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    });
    if name.is_empty() || name.len() > 253 || !labels_ok {
        return Some("is not a valid domain name (letters, digits, '-' and '.'; IDNs in punycode)");
    }
    if !name.contains('.') {
        return Some("is not a fully qualified domain name");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acme(toml: &str) -> Result<AcmeConfig, Vec<String>> {
        let raw: RawTls = toml::from_str(toml).unwrap();
        let mut problems = Vec::new();
        match validate(
            Some(&raw),
            Path::new("/var/lib/hookbox/hookbox.db"),
            &mut problems,
        ) {
            Some(TlsConfig::Acme(config)) => Ok(config),
            Some(TlsConfig::Files(_)) => panic!("files from {toml}"),
            None => Err(problems),
        }
    }

    #[test]
    fn acme_defaults_to_lets_encrypt_and_a_cache_next_to_the_database() {
        let config = acme(
            "[acme]\ndomains = [\"Hooks.Example.com.\", \"hooks.example.com\"]\ncontact = [\"ops@example.com\"]",
        )
        .unwrap();
        assert_eq!(config.domains, ["hooks.example.com"]);
        assert_eq!(config.contact, ["mailto:ops@example.com"]);
        assert_eq!(config.directory, LETS_ENCRYPT);
        assert_eq!(config.cache_dir, Path::new("/var/lib/hookbox/acme"));
        let staging = acme("[acme]\ndomains = [\"a.example\"]\nstaging = true").unwrap();
        assert_eq!(staging.directory, LETS_ENCRYPT_STAGING);
    }

    #[test]
    fn bad_acme_settings_are_all_named() {
        let problems = acme(
            "[acme]\ndomains = [\"*.example.com\", \"10.0.0.1\", \"localhost\", \"bad_name.example\"]\n\
             contact = [\"mailto:nobody\"]\ndirectory = \"http://acme.example/dir\"\nstaging = true",
        )
        .unwrap_err()
        .join("\n");
        for expected in [
            "\"*.example.com\" is a wildcard",
            "\"10.0.0.1\" is an IP address",
            "\"localhost\" is not a fully qualified",
            "\"bad_name.example\" is not a valid domain",
            "\"mailto:nobody\" is not a mailto: address",
            "set directory or staging = true, not both",
        ] {
            assert!(
                problems.contains(expected),
                "{expected} missing from:\n{problems}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let not_pem = dir.path().join("ca.pem");
        std::fs::write(&not_pem, "hello").unwrap();
        let problems = acme(&format!(
            "[acme]\ndomains = []\ndirectory = \"http://x.example/d\"\ndirectory_ca = {:?}",
            not_pem.display().to_string()
        ))
        .unwrap_err()
        .join("\n");
        assert!(
            problems.contains("no PEM certificate in the file"),
            "{problems}"
        );
        assert!(problems.contains("name at least one domain"), "{problems}");
        assert!(problems.contains("must be an https:// URL"), "{problems}");
    }

    #[test]
    fn files_and_acme_together_or_half_a_pair_are_refused() {
        for (toml, expected) in [
            (
                "cert = \"a\"\nkey = \"b\"\n[acme]\ndomains = [\"a.example\"]",
                "not both",
            ),
            ("cert = \"a\"", "server.tls.key: required"),
            ("key = \"b\"", "server.tls.cert: required"),
            ("", "set cert and key, or [server.tls.acme]"),
        ] {
            let raw: RawTls = toml::from_str(toml).unwrap();
            let mut problems = Vec::new();
            assert!(validate(Some(&raw), Path::new("db"), &mut problems).is_none());
            assert!(
                problems.iter().any(|p| p.contains(expected)),
                "{toml:?}: {problems:?}"
            );
        }
    }
}
