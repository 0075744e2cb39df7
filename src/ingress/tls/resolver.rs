//! The certificate the public listener serves, and the TLS-ALPN-01
//! challenge certificates of an ACME order in progress.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use prometheus_client::metrics::gauge::Gauge;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::ACME_TLS_ALPN;

/// rustls asks it for the certificate on each handshake.
#[derive(Default)]
pub struct CertStore {
    /// `None` until ACME obtains the first certificate: handshakes fail.
    current: RwLock<Option<Arc<CertifiedKey>>>,
    /// By domain: served only to handshakes offering `acme-tls/1`.
    challenges: RwLock<HashMap<String, Arc<CertifiedKey>>>,
    /// The served certificate's not-after, in Unix seconds, for alerting.
    expiry: Gauge,
}

impl fmt::Debug for CertStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertStore").finish_non_exhaustive()
    }
}

// A writer that panicked mid-swap still left a whole value behind, so a
// poisoned lock is read through.
impl CertStore {
    /// An empty store that reports the expiry of what it serves to
    /// `expiry`.
    pub fn new(expiry: Gauge) -> CertStore {
        CertStore {
            expiry,
            ..CertStore::default()
        }
    }

    pub fn set(&self, pair: CertifiedKey) {
        if let Some(leaf) = pair.cert.first()
            && let Ok((_, parsed)) = x509_parser::parse_x509_certificate(leaf)
        {
            self.expiry.set(parsed.validity().not_after.timestamp());
        }
        *self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Arc::new(pair));
    }

    pub fn current(&self) -> Option<Arc<CertifiedKey>> {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    pub fn add_challenge(&self, domain: &str, pair: CertifiedKey) {
        self.challenges
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(domain.to_owned(), Arc::new(pair));
    }

    pub fn remove_challenge(&self, domain: &str) {
        self.challenges
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(domain);
    }

    fn challenge(&self, domain: &str) -> Option<Arc<CertifiedKey>> {
        self.challenges
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&domain.to_ascii_lowercase())
            .cloned()
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let validation = hello
            .alpn()
            .is_some_and(|mut offered| offered.any(|p| p == ACME_TLS_ALPN));
        if validation {
            // RFC 8737: the validator names the domain in SNI and offers
            // only acme-tls/1; nothing else is served on such a handshake.
            return self.challenge(hello.server_name()?);
        }
        self.current()
    }
}
