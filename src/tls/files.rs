//! A certificate and key on disk (`[server.tls] cert`, `key`), swapped
//! without a restart.
//!
//! [`load`] reads a PEM pair and checks that the key belongs to the
//! certificate; config validation calls it so `hookbox check` and start-up
//! name the bad file. [`Reloader::run`] swaps the pair in the
//! [`CertStore`] on SIGHUP and when either file's modification time, size
//! or inode changes (checked every `watch_interval`). Polling rather than inotify: certbot and most ACME
//! clients write a new file and rename it (or repoint a symlink) into
//! place, which a poll of `metadata()` sees whatever the path's history,
//! and a stat of two files every few seconds costs nothing. A pair that
//! fails to load is logged with its path and the old one keeps serving.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_util::sync::CancellationToken;

use prometheus_client::metrics::gauge::Gauge;

use super::{CertStore, provider};
use crate::config::TlsFiles;

/// Why a certificate/key pair cannot be served; each names its file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cert {path}: cannot read: {source}")]
    ReadCert {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("key {path}: cannot read: {source}")]
    ReadKey {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cert {path}: no PEM certificate in the file ({why})")]
    BadCert { path: PathBuf, why: String },
    #[error(
        "key {path}: no PEM private key in the file (PKCS#8 \"PRIVATE KEY\", PKCS#1 \"RSA PRIVATE KEY\" or SEC1 \"EC PRIVATE KEY\"): {why}"
    )]
    BadKey { path: PathBuf, why: String },
    #[error("key {key}: unusable ({why})")]
    UnusableKey { key: PathBuf, why: rustls::Error },
    #[error("key {key} does not match the certificate in {cert}")]
    Mismatch { key: PathBuf, cert: PathBuf },
}

/// Reads the chain at `cert` and the key at `key` and checks they belong
/// together.
pub fn load(cert: &Path, key: &Path) -> Result<CertifiedKey, LoadError> {
    let cert_pem = std::fs::read(cert).map_err(|source| LoadError::ReadCert {
        path: cert.to_owned(),
        source,
    })?;
    let key_pem = std::fs::read(key).map_err(|source| LoadError::ReadKey {
        path: key.to_owned(),
        source,
    })?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| LoadError::BadCert {
            path: cert.to_owned(),
            why: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(LoadError::BadCert {
            path: cert.to_owned(),
            why: "no CERTIFICATE section".to_owned(),
        });
    }
    let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| LoadError::BadKey {
        path: key.to_owned(),
        why: e.to_string(),
    })?;
    CertifiedKey::from_der(chain, private, &provider()).map_err(|why| match why {
        rustls::Error::InconsistentKeys(_) => LoadError::Mismatch {
            key: key.to_owned(),
            cert: cert.to_owned(),
        },
        why => LoadError::UnusableKey {
            key: key.to_owned(),
            why,
        },
    })
}

/// What a file looked like when last loaded: a rename into place changes
/// the inode, an in-place rewrite the time or size.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp(Option<(SystemTime, u64, u64)>);

impl Stamp {
    fn of(path: &Path) -> Stamp {
        Stamp(std::fs::metadata(path).ok().map(|m| {
            (
                m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                m.len(),
                m.ino(),
            )
        }))
    }
}

/// Loads the configured pair and swaps it in on SIGHUP or a file change.
pub struct Reloader {
    store: Arc<CertStore>,
    config: TlsFiles,
    hangup: Signal,
    seen: (Stamp, Stamp),
}

impl Reloader {
    /// Loads the pair (an error names the file) and starts listening for
    /// SIGHUP, so a reload asked for before [`Reloader::run`] starts is not
    /// lost (nor kills the process, SIGHUP's default).
    pub fn new(config: &TlsFiles, expiry: Gauge) -> anyhow::Result<Reloader> {
        let seen = (Stamp::of(&config.cert), Stamp::of(&config.key));
        let pair = load(&config.cert, &config.key)?;
        let hangup = signal(SignalKind::hangup()).context("listening for SIGHUP")?;
        let store = Arc::new(CertStore::new(expiry));
        store.set(pair);
        Ok(Reloader {
            store,
            config: config.clone(),
            hangup,
            seen,
        })
    }

    pub fn store(&self) -> Arc<CertStore> {
        self.store.clone()
    }

    /// Swaps the pair on SIGHUP, and when a file changes if
    /// `watch_interval` is not zero, until `shutdown`.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let interval = self.config.watch_interval;
        let mut tick = tokio::time::interval(if interval.is_zero() {
            Duration::from_secs(3600)
        } else {
            interval
        });
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        tick.tick().await;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = self.hangup.recv() => self.reload("SIGHUP"),
                _ = tick.tick(), if !interval.is_zero() => {
                    let now = (Stamp::of(&self.config.cert), Stamp::of(&self.config.key));
                    if now != self.seen {
                        self.reload("files changed");
                    }
                }
            }
        }
    }

    /// Loads the pair again; on failure the old one keeps serving. The
    /// stamps are taken first, so a failed pair is not retried until a
    /// file changes again (or SIGHUP), rather than logged every tick.
    fn reload(&mut self, why: &str) {
        self.seen = (Stamp::of(&self.config.cert), Stamp::of(&self.config.key));
        match load(&self.config.cert, &self.config.key) {
            Ok(pair) => {
                self.store.set(pair);
                tracing::info!(
                    reason = why,
                    cert = %self.config.cert.display(),
                    "TLS certificate reloaded"
                );
            }
            Err(e) => tracing::error!(
                reason = why,
                error = %e,
                "TLS certificate not reloaded; still serving the previous one"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(dir: &Path, name: &str, key_pem: &str) -> (PathBuf, PathBuf) {
        let key = rcgen::KeyPair::from_pem(key_pem).unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let cert_path = dir.join(format!("{name}.crt"));
        let key_path = dir.join(format!("{name}.key"));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key_pem).unwrap();
        (cert_path, key_path)
    }

    #[test]
    fn a_matching_pkcs8_pair_loads_and_a_mismatched_one_names_both_files() {
        let dir = tempfile::tempdir().unwrap();
        let (cert_a, key_a) = pair(
            dir.path(),
            "a",
            &rcgen::KeyPair::generate().unwrap().serialize_pem(),
        );
        let (_, key_b) = pair(
            dir.path(),
            "b",
            &rcgen::KeyPair::generate().unwrap().serialize_pem(),
        );
        load(&cert_a, &key_a).unwrap();
        let err = load(&cert_a, &key_b).unwrap_err().to_string();
        assert!(err.contains("does not match"), "{err}");
        assert!(err.contains(&key_b.display().to_string()), "{err}");
        assert!(err.contains(&cert_a.display().to_string()), "{err}");
    }

    #[test]
    fn pkcs1_and_sec1_pem_labels_are_recognised_and_a_bad_key_names_its_file() {
        use rustls::pki_types::{PrivatePkcs1KeyDer, PrivateSec1KeyDer};
        let dir = tempfile::tempdir().unwrap();
        // rcgen writes PKCS#8 only; these check that the other two labels
        // reach the key parser (which rustls's aws-lc-rs provider handles).
        let sec1 = "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n";
        assert!(PrivateSec1KeyDer::from_pem_slice(sec1.as_bytes()).is_ok());
        assert!(matches!(
            PrivateKeyDer::from_pem_slice(sec1.as_bytes()),
            Ok(PrivateKeyDer::Sec1(_))
        ));
        let pkcs1 = "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n";
        assert!(PrivatePkcs1KeyDer::from_pem_slice(pkcs1.as_bytes()).is_ok());
        assert!(matches!(
            PrivateKeyDer::from_pem_slice(pkcs1.as_bytes()),
            Ok(PrivateKeyDer::Pkcs1(_))
        ));
        // A garbage key is refused naming the key file.
        let (cert, _) = pair(
            dir.path(),
            "c",
            &rcgen::KeyPair::generate().unwrap().serialize_pem(),
        );
        let bad = dir.path().join("bad.key");
        std::fs::write(&bad, sec1).unwrap();
        let err = load(&cert, &bad).unwrap_err().to_string();
        assert!(err.starts_with(&format!("key {}", bad.display())), "{err}");
    }

    #[test]
    fn missing_and_empty_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let missing = dir.path().join("missing.pem");
        let err = load(&missing, &empty).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("cert {}: cannot read", missing.display())),
            "{err}"
        );
        let err = load(&empty, &missing).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("key {}: cannot read", missing.display())),
            "{err}"
        );
        let (_, key) = pair(
            dir.path(),
            "d",
            &rcgen::KeyPair::generate().unwrap().serialize_pem(),
        );
        let err = load(&empty, &key).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("cert {}", empty.display())),
            "{err}"
        );
    }
}
