//! `[server.tls]`: the public listener's certificate and key files.
//!
//! Validation loads the pair (`crate::tls::load`), so a missing file, an
//! unreadable key or a key that belongs to another certificate stops
//! `hookbox check` and start-up with the path named.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration;

/// `[server.tls]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    /// PEM certificate chain, leaf first (certbot's `fullchain.pem`).
    pub cert: PathBuf,
    /// PEM private key: PKCS#8, PKCS#1 (RSA) or SEC1 (EC).
    pub key: PathBuf,
    /// How often both files are checked for a change; `0s` leaves
    /// reloading to SIGHUP alone.
    #[serde(default = "default_watch_interval", with = "duration")]
    pub watch_interval: Duration,
}

fn default_watch_interval() -> Duration {
    Duration::from_secs(5)
}

/// The validated TLS settings.
#[derive(Debug, Clone)]
pub struct TlsConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub watch_interval: Duration,
}

pub fn validate(tls: Option<&RawTls>, problems: &mut Vec<String>) -> Option<TlsConfig> {
    let tls = tls?;
    let before = problems.len();
    if !tls.watch_interval.is_zero() && tls.watch_interval < Duration::from_secs(1) {
        problems.push("server.tls.watch_interval: at least 1s, or 0s for SIGHUP only".to_owned());
    }
    if let Err(e) = crate::tls::load(&tls.cert, &tls.key) {
        problems.push(format!("server.tls: {e}"));
    }
    (problems.len() == before).then(|| TlsConfig {
        cert: tls.cert.clone(),
        key: tls.key.clone(),
        watch_interval: tls.watch_interval,
    })
}
