//! TLS on the public listener (`[server.tls]`), with a certificate from
//! files ([`files`]) or obtained and renewed over ACME ([`acme`]).
//!
//! Either way a [`CertStore`] is rustls's certificate resolver: every new
//! handshake reads the pair it holds, so a swap reaches new connections at
//! once while established ones keep the session they negotiated.
//! `crate::ingress::server` runs the handshake (under the header timeout and the
//! connection cap); the admin listener never uses this module.

pub mod acme;
mod files;
mod resolver;

use std::sync::Arc;

use anyhow::Context as _;
use prometheus_client::metrics::gauge::Gauge;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

pub use files::Reloader;
pub use resolver::CertStore;

use crate::config::TlsConfig;
use crate::config::cert::provider;

/// The ALPN protocol of a TLS-ALPN-01 validation (RFC 8737): such a
/// handshake is the whole exchange, no HTTP follows.
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// What keeps the public listener's certificate current.
pub enum Manager {
    Files(Reloader),
    Acme(acme::Acme),
}

impl Manager {
    /// Loads the files, or the cached ACME certificate if there is one.
    /// `expiry` follows the served certificate's not-after.
    pub fn new(config: &TlsConfig, expiry: Gauge) -> anyhow::Result<Manager> {
        Ok(match config {
            TlsConfig::Files(files) => {
                Manager::Files(Reloader::new(files, expiry).context("loading the TLS certificate")?)
            }
            TlsConfig::Acme(acme) => Manager::Acme(acme::Acme::new(acme, expiry)?),
        })
    }

    /// A rustls acceptor for HTTP/1.1 over TLS 1.2 or 1.3, serving what
    /// the store holds at each handshake; with ACME it also answers
    /// TLS-ALPN-01 validations.
    pub fn acceptor(&self) -> anyhow::Result<TlsAcceptor> {
        let (store, acme) = match self {
            Manager::Files(reloader) => (reloader.store(), false),
            Manager::Acme(acme) => (acme.store(), true),
        };
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .context("choosing TLS versions")?
            .with_no_client_auth()
            .with_cert_resolver(store);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        if acme {
            config.alpn_protocols.push(ACME_TLS_ALPN.to_vec());
        }
        Ok(TlsAcceptor::from(Arc::new(config)))
    }

    /// Keeps the certificate current until `shutdown`.
    pub fn spawn(self, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
        match self {
            Manager::Files(reloader) => tokio::spawn(
                reloader
                    .run(shutdown)
                    .instrument(tracing::info_span!("tls_reload")),
            ),
            Manager::Acme(acme) => {
                tokio::spawn(acme.run(shutdown).instrument(tracing::info_span!("acme")))
            }
        }
    }
}
