//! A certificate and private key on disk, read and checked to belong
//! together.
//!
//! `[server.tls]` validation loads the pair so `hookbox check` and start-up
//! name a missing file, an unreadable key or a key of another certificate;
//! `crate::ingress::tls` loads it the same way to serve it, at start and on every
//! reload. It lives in config so that config depends on no other module
//! of hookbox; [`provider`] is here with it, since the pair must be checked
//! with the backend that serves it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

/// The crypto provider reqwest and jsonwebtoken already build (aws-lc-rs),
/// so hookbox compiles one backend.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

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
