//! The ACME state kept on disk: the account credentials and the
//! certificate with its key, per directory URL, so switching from the
//! staging directory to production never serves a staging certificate.
//!
//! Layout under `cache_dir` (0700), `<id>` being the first 16 hex digits of
//! the SHA-256 of the directory URL:
//! `account-<id>.json`, `cert-<id>.pem` (the chain, leaf first),
//! `key-<id>.pem` and, while orders fail, `backoff-<id>.json`, each 0600
//! and replaced atomically.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use instant_acme::AccountCredentials;
use sha2::{Digest as _, Sha256};

use super::backoff::Backoff;
use crate::support::private_file;

pub struct Cache {
    account: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    backoff: PathBuf,
}

/// A certificate chain and its key, as PEM.
pub struct Pem {
    pub chain: String,
    pub key: String,
}

impl Cache {
    pub fn open(dir: &Path, directory: &str) -> anyhow::Result<Cache> {
        private_file::create_dir(dir)
            .with_context(|| format!("creating the ACME cache directory {}", dir.display()))?;
        let id = &hex::encode(Sha256::digest(directory.as_bytes()))[..16];
        Ok(Cache {
            account: dir.join(format!("account-{id}.json")),
            cert: dir.join(format!("cert-{id}.pem")),
            key: dir.join(format!("key-{id}.pem")),
            backoff: dir.join(format!("backoff-{id}.json")),
        })
    }

    pub fn backoff_path(&self) -> &Path {
        &self.backoff
    }

    pub fn cert_path(&self) -> &Path {
        &self.cert
    }

    pub fn load_account(&self) -> anyhow::Result<Option<AccountCredentials>> {
        let Some(bytes) = read_if_present(&self.account)? else {
            return Ok(None);
        };
        let credentials = serde_json::from_slice(&bytes).with_context(|| {
            format!(
                "{}: not ACME account credentials; move it away to register a new account",
                self.account.display()
            )
        })?;
        Ok(Some(credentials))
    }

    pub fn save_account(&self, credentials: &AccountCredentials) -> anyhow::Result<()> {
        let json = serde_json::to_vec(credentials).context("encoding the ACME account")?;
        private_file::write(&self.account, &json)
            .with_context(|| format!("writing {}", self.account.display()))
    }

    /// Removes the account, so the next order registers a new one.
    pub fn forget_account(&self) -> anyhow::Result<()> {
        remove_if_present(&self.account)
    }

    /// The cached pair, if both files are there.
    pub fn load_cert(&self) -> anyhow::Result<Option<Pem>> {
        let (Some(chain), Some(key)) = (read_if_present(&self.cert)?, read_if_present(&self.key)?)
        else {
            return Ok(None);
        };
        Ok(Some(Pem {
            chain: String::from_utf8_lossy(&chain).into_owned(),
            key: String::from_utf8_lossy(&key).into_owned(),
        }))
    }

    /// The key goes first: a crash between the two renames leaves a new
    /// key beside the old chain, which fails to load as a mismatch and so
    /// is ordered again, rather than an old key silently paired with a
    /// chain it cannot serve.
    pub fn save_cert(&self, pem: &Pem) -> anyhow::Result<()> {
        private_file::write(&self.key, pem.key.as_bytes())
            .with_context(|| format!("writing {}", self.key.display()))?;
        private_file::write(&self.cert, pem.chain.as_bytes())
            .with_context(|| format!("writing {}", self.cert.display()))
    }

    /// The failures recorded for `domains`; none if they were for another
    /// list.
    pub fn load_backoff(&self, domains: &[String]) -> anyhow::Result<Option<Backoff>> {
        let Some(bytes) = read_if_present(&self.backoff)? else {
            return Ok(None);
        };
        let backoff: Backoff = serde_json::from_slice(&bytes)
            .with_context(|| format!("{}: not an ACME backoff record", self.backoff.display()))?;
        Ok(Some(backoff).filter(|b| b.covers(domains)))
    }

    pub fn save_backoff(&self, backoff: &Backoff) -> anyhow::Result<()> {
        let json = serde_json::to_vec(backoff).context("encoding the ACME backoff")?;
        private_file::write(&self.backoff, &json)
            .with_context(|| format!("writing {}", self.backoff.display()))
    }

    pub fn clear_backoff(&self) -> anyhow::Result<()> {
        remove_if_present(&self.backoff)
    }
}

fn remove_if_present(path: &Path) -> anyhow::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", path.display()))
        }
        _ => Ok(()),
    }
}

fn read_if_present(path: &Path) -> anyhow::Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}
