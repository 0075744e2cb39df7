//! Certificates obtained and renewed over ACME (`[server.tls.acme]`),
//! validated with TLS-ALPN-01 on the public listener itself, so port 443
//! alone is enough: no port 80, no DNS API.
//!
//! The protocol is instant-acme's; this module decides when to order,
//! answers the validation and keeps the result. At start the cached
//! certificate (see [`cache`]) is served if it covers the configured
//! domains. An order runs when there is none, and again once less than a
//! third of the served certificate's lifetime remains (Let's Encrypt's
//! advice: 30 days of 90). For each pending authorization a self-signed
//! certificate carrying the `acmeIdentifier` extension (RFC 8737) goes into
//! the [`CertStore`], served only to handshakes that offer `acme-tls/1`;
//! `crate::ingress::server` closes such a connection after the handshake. A failed
//! order is logged with the CA's reason and retried after 2 minutes,
//! doubling up to an hour: Let's Encrypt allows five failed validations per
//! domain an hour. The count and the next attempt are kept in the cache,
//! so restarting does not start over (see [`backoff`]). An account the CA
//! no longer knows is forgotten and a new one registered at once. Until the
//! first certificate arrives, handshakes fail.

mod backoff;
mod cache;
mod http;

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::{Context as _, anyhow, bail};
use instant_acme::{
    Account, AccountBuilder, AuthorizationStatus, ChallengeType, Identifier, NewAccount, NewOrder,
    Order, OrderStatus, RetryPolicy,
};
use prometheus_client::metrics::gauge::Gauge;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use x509_parser::extensions::GeneralName;

use super::{CertStore, provider};
use crate::config::AcmeConfig;
use backoff::{Backoff, seconds_until, unix_now};
use cache::{Cache, Pem};

/// A whole order, from registering to downloading, gets this long.
const ORDER_TIMEOUT: Duration = Duration::from_secs(300);
/// How long the CA gets to validate every domain.
const VALIDATION_TIMEOUT: Duration = Duration::from_secs(120);
/// Sleeps towards the renewal time are at most this long, so a wall clock
/// that jumps (or a VM that was suspended) is noticed within the hour.
const RECHECK: Duration = Duration::from_secs(3600);

/// The problem type of an order from an account the CA does not know.
const ACCOUNT_DOES_NOT_EXIST: &str = "urn:ietf:params:acme:error:accountDoesNotExist";

/// When the served certificate was issued and when it expires (Unix s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub not_before: i64,
    pub not_after: i64,
}

impl Validity {
    /// Once less than a third of the lifetime remains.
    pub fn renew_at(&self) -> i64 {
        self.not_after - (self.not_after - self.not_before) / 3
    }
}

pub struct Acme {
    config: AcmeConfig,
    store: Arc<CertStore>,
    cache: Cache,
    served: Option<Validity>,
    account: Option<Account>,
}

impl Acme {
    /// Opens the cache and serves the cached certificate if it is usable.
    pub fn new(config: &AcmeConfig, expiry: Gauge) -> anyhow::Result<Acme> {
        let cache = Cache::open(&config.cache_dir, &config.directory)?;
        let store = Arc::new(CertStore::new(expiry));
        let mut served = None;
        match cache.load_cert() {
            Ok(Some(pem)) => match certified(&pem, &config.domains) {
                Ok((pair, validity)) => {
                    store.set(pair);
                    served = Some(validity);
                    tracing::info!(
                        cert = %cache.cert_path().display(),
                        expires = %timestamp(validity.not_after),
                        "serving the cached ACME certificate"
                    );
                }
                Err(e) => tracing::warn!(
                    cert = %cache.cert_path().display(),
                    error = format!("{e:#}"),
                    "not serving the cached ACME certificate; ordering a new one"
                ),
            },
            Ok(None) => tracing::info!(
                domains = ?config.domains,
                "no ACME certificate yet: TLS handshakes fail until the first order completes"
            ),
            Err(e) => tracing::warn!(error = format!("{e:#}"), "ordering a new ACME certificate"),
        }
        Ok(Acme {
            config: config.clone(),
            store,
            cache,
            served,
            account: None,
        })
    }

    pub fn store(&self) -> Arc<CertStore> {
        self.store.clone()
    }

    /// Orders when due, until `shutdown`.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut backoff = self.recorded_backoff();
        // The wait runs on the monotonic clock: see [`backoff`].
        let mut next_order = Instant::now() + backoff.remaining(unix_now());
        loop {
            let due_in = self
                .due_in()
                .max(next_order.saturating_duration_since(Instant::now()));
            if !due_in.is_zero() {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(due_in.min(RECHECK)) => continue,
                }
            }
            let attempt = tokio::time::timeout(ORDER_TIMEOUT, self.obtain());
            let outcome = tokio::select! {
                () = shutdown.cancelled() => return,
                outcome = attempt => outcome
                    .unwrap_or_else(|_| Err(anyhow!("the order did not finish within {ORDER_TIMEOUT:?}"))),
            };
            match outcome {
                Ok(validity) => {
                    backoff = Backoff::default();
                    // Also a record left for other domains: it is stale now.
                    if let Err(e) = self.cache.clear_backoff() {
                        tracing::warn!(error = format!("{e:#}"), "cannot clear the ACME backoff");
                    }
                    tracing::info!(
                        domains = ?self.config.domains,
                        expires = %timestamp(validity.not_after),
                        renew_after = %timestamp(validity.renew_at()),
                        "ACME certificate obtained and served"
                    );
                }
                Err(e) => {
                    // An account the CA no longer knows (a test CA reset,
                    // a deactivated account) is registered anew, at once.
                    let unknown_account = e.chain().any(|cause| {
                        matches!(
                            cause.downcast_ref::<instant_acme::Error>(),
                            Some(instant_acme::Error::Api(problem))
                                if problem.r#type.as_deref() == Some(ACCOUNT_DOES_NOT_EXIST)
                        )
                    });
                    if unknown_account {
                        self.account = None;
                    }
                    if unknown_account && let Err(e) = self.cache.forget_account() {
                        tracing::warn!(
                            error = format!("{e:#}"),
                            "cannot remove the cached ACME account"
                        );
                    }
                    let wait = backoff.failed(&self.config.domains, unix_now(), unknown_account);
                    next_order = Instant::now() + wait;
                    if let Err(e) = self.cache.save_backoff(&backoff) {
                        tracing::warn!(
                            error = format!("{e:#}"),
                            "cannot record the ACME backoff; a restart will order at once"
                        );
                    }
                    tracing::error!(
                        domains = ?self.config.domains,
                        directory = %self.config.directory,
                        error = format!("{e:#}"),
                        retry_in = ?wait,
                        "ACME order failed"
                    );
                }
            }
        }
    }

    /// The failures recorded by earlier runs, so a restart keeps waiting
    /// rather than ordering again at once.
    fn recorded_backoff(&self) -> Backoff {
        match self.cache.load_backoff(&self.config.domains) {
            Ok(Some(backoff)) => {
                tracing::warn!(
                    failures = backoff.failures,
                    next_order = %timestamp(backoff.retry_at),
                    backoff = %self.cache.backoff_path().display(),
                    "ACME orders failed before this start; the next one waits its turn \
                     (remove the backoff file and restart to order at once)"
                );
                backoff
            }
            Ok(None) => Backoff::default(),
            Err(e) => {
                tracing::warn!(error = format!("{e:#}"), "ignoring the ACME backoff record");
                Backoff::default()
            }
        }
    }

    fn due_in(&self) -> Duration {
        let Some(validity) = self.served else {
            return Duration::ZERO;
        };
        seconds_until(validity.renew_at(), unix_now())
    }

    /// One order, start to finish; on success the new pair is cached and
    /// served.
    async fn obtain(&mut self) -> anyhow::Result<Validity> {
        let account = self.account().await?;
        let identifiers = self
            .config
            .domains
            .iter()
            .map(|d| Identifier::Dns(d.clone()))
            .collect::<Vec<_>>();
        let mut order = account
            .new_order(&NewOrder::new(&identifiers))
            .await
            .context("creating the order")?;
        let mut challenges = Challenges {
            store: &self.store,
            domains: Vec::new(),
        };
        let mut authorizations = order.authorizations();
        while let Some(authorization) = authorizations.next().await {
            let mut authorization = authorization.context("fetching an authorization")?;
            match authorization.status {
                AuthorizationStatus::Pending => {}
                AuthorizationStatus::Valid => continue,
                status => bail!(
                    "the authorization for {} is {status:?}",
                    authorization.identifier()
                ),
            }
            let mut challenge = authorization
                .challenge(ChallengeType::TlsAlpn01)
                .ok_or_else(|| anyhow!("the CA offers no tls-alpn-01 challenge"))?;
            let domain = challenge.identifier().to_string();
            let digest = challenge.key_authorization().digest();
            challenges.add(&domain, challenge_cert(&domain, digest.as_ref())?);
            challenge
                .set_ready()
                .await
                .with_context(|| format!("asking the CA to validate {domain}"))?;
        }
        let status = order
            .poll_ready(&RetryPolicy::new().timeout(VALIDATION_TIMEOUT))
            .await
            .context("waiting for the CA to validate")?;
        if status != OrderStatus::Ready {
            bail!("validation failed: {}", why_invalid(&mut order).await);
        }
        drop(challenges);
        let key = order.finalize().await.context("finalizing the order")?;
        let chain = order
            .poll_certificate(&RetryPolicy::new())
            .await
            .context("downloading the certificate")?;
        let pem = Pem { chain, key };
        let (pair, validity) =
            certified(&pem, &self.config.domains).context("the issued certificate")?;
        // Served first: a certificate the CA issued is not thrown away (and
        // ordered again, against the CA's limits) because the cache cannot
        // be written; only the next restart would miss it.
        self.store.set(pair);
        self.served = Some(validity);
        if let Err(e) = self.cache.save_cert(&pem) {
            tracing::warn!(
                error = format!("{e:#}"),
                "cannot cache the ACME certificate; serving it anyway"
            );
        }
        Ok(validity)
    }

    /// The cached account, or a new one registered (agreeing to the CA's
    /// terms, which setting `[server.tls.acme]` does) and saved.
    async fn account(&mut self) -> anyhow::Result<Account> {
        if let Some(account) = &self.account {
            return Ok(account.clone());
        }
        let account = match self.cache.load_account()? {
            Some(credentials) => self
                .builder()?
                .from_credentials(credentials)
                .await
                .with_context(|| {
                    format!("loading the ACME account at {}", self.config.directory)
                })?,
            None => {
                let contact = self
                    .config
                    .contact
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>();
                let (account, credentials) = self
                    .builder()?
                    .create(
                        &NewAccount {
                            contact: &contact,
                            terms_of_service_agreed: true,
                            only_return_existing: false,
                        },
                        self.config.directory.clone(),
                        None,
                    )
                    .await
                    .with_context(|| {
                        format!("registering an ACME account at {}", self.config.directory)
                    })?;
                tracing::info!(directory = %self.config.directory, "ACME account registered");
                if let Err(e) = self.cache.save_account(&credentials) {
                    tracing::warn!(
                        error = format!("{e:#}"),
                        "cannot cache the ACME account; a restart will register another"
                    );
                }
                account
            }
        };
        self.account = Some(account.clone());
        Ok(account)
    }

    fn builder(&self) -> anyhow::Result<AccountBuilder> {
        let client = http::Client::new(self.config.directory_ca.as_deref())?;
        Ok(Account::builder_with_http(Box::new(client)))
    }
}

/// The challenge certificates of one order, withdrawn when it ends however
/// it ends.
struct Challenges<'a> {
    store: &'a CertStore,
    domains: Vec<String>,
}

impl Challenges<'_> {
    fn add(&mut self, domain: &str, pair: CertifiedKey) {
        self.store.add_challenge(domain, pair);
        self.domains.push(domain.to_owned());
    }
}

impl Drop for Challenges<'_> {
    fn drop(&mut self) {
        for domain in &self.domains {
            self.store.remove_challenge(domain);
        }
    }
}

/// A TLS-ALPN-01 response: self-signed for `domain`, carrying the SHA-256
/// of the key authorization in the critical `acmeIdentifier` extension.
fn challenge_cert(domain: &str, digest: &[u8]) -> anyhow::Result<CertifiedKey> {
    let mut params = rcgen::CertificateParams::new(vec![domain.to_owned()])
        .context("challenge certificate parameters")?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let key = rcgen::KeyPair::generate().context("challenge certificate key")?;
    let cert = params
        .self_signed(&key)
        .context("signing the challenge certificate")?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    // Not `CertifiedKey::from_der`: its key check parses the certificate
    // with webpki, which refuses the critical extension RFC 8737 demands.
    let signer = provider()
        .key_provider
        .load_private_key(key)
        .context("loading the challenge key")?;
    Ok(CertifiedKey::new(vec![cert.der().clone()], signer))
}

/// The CA's reasons for an invalid order, from its challenges.
async fn why_invalid(order: &mut Order) -> String {
    let mut reasons = Vec::new();
    let mut authorizations = order.authorizations();
    while let Some(Ok(authorization)) = authorizations.next().await {
        for challenge in &authorization.challenges {
            if let Some(problem) = &challenge.error {
                reasons.push(format!("{}: {problem}", authorization.identifier()));
            }
        }
    }
    if reasons.is_empty() {
        "the CA gave no reason".to_owned()
    } else {
        reasons.join("; ")
    }
}

/// The pair ready to serve and its validity, if it covers every domain.
fn certified(pem: &Pem, domains: &[String]) -> anyhow::Result<(CertifiedKey, Validity)> {
    let chain = CertificateDer::pem_slice_iter(pem.chain.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .context("reading the certificate chain")?;
    let leaf = chain.first().context("the chain holds no certificate")?;
    let (_, parsed) =
        x509_parser::parse_x509_certificate(leaf).context("parsing the certificate")?;
    let validity = Validity {
        not_before: parsed.validity().not_before.timestamp(),
        not_after: parsed.validity().not_after.timestamp(),
    };
    let names = parsed
        .subject_alternative_name()
        .context("reading the certificate's names")?
        .map(|san| {
            san.value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    GeneralName::DNSName(dns) => Some(dns.to_ascii_lowercase()),
                    _ => None,
                })
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    if let Some(missing) = domains.iter().find(|d| !names.contains(d)) {
        bail!("it does not cover {missing} (it covers {names:?})");
    }
    let key = PrivateKeyDer::from_pem_slice(pem.key.as_bytes()).context("reading the key")?;
    let pair = CertifiedKey::from_der(chain, key, &provider())
        .context("the key does not match the certificate")?;
    Ok((pair, validity))
}

fn timestamp(unix: i64) -> humantime::Rfc3339Timestamp {
    humantime::format_rfc3339_seconds(
        UNIX_EPOCH + Duration::from_secs(u64::try_from(unix).unwrap_or(0)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed(names: &[&str], days: (i64, i64)) -> Pem {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(
            names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>(),
        )
        .unwrap();
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now + time::Duration::days(days.0);
        params.not_after = now + time::Duration::days(days.1);
        let cert = params.self_signed(&key).unwrap();
        Pem {
            chain: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    #[test]
    fn a_certificate_is_renewed_once_a_third_of_its_lifetime_remains() {
        let validity = Validity {
            not_before: 0,
            not_after: 90 * 86_400,
        };
        assert_eq!(validity.renew_at(), 60 * 86_400);
    }

    #[test]
    fn a_cached_pair_is_used_only_if_it_covers_every_domain_and_matches_its_key() {
        let pem = self_signed(&["a.example", "b.example"], (-10, 80));
        let (_, validity) = certified(&pem, &["b.example".to_owned()]).unwrap();
        assert_eq!(validity.not_after - validity.not_before, 90 * 86_400);
        let err = certified(&pem, &["c.example".to_owned()]).unwrap_err();
        assert!(
            format!("{err:#}").contains("does not cover c.example"),
            "{err:#}"
        );
        let other = self_signed(&["a.example"], (0, 1));
        let mismatched = Pem {
            chain: pem.chain.clone(),
            key: other.key,
        };
        let err = certified(&mismatched, &["a.example".to_owned()]).unwrap_err();
        assert!(format!("{err:#}").contains("does not match"), "{err:#}");
    }

    #[test]
    fn a_backoff_recorded_for_other_domains_is_not_applied() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path(), "https://ca.example/dir").unwrap();
        let domains = vec!["a.example".to_owned()];
        assert_eq!(cache.load_backoff(&domains).unwrap(), None);
        let backoff = Backoff {
            failures: 2,
            retry_at: 1_234,
            domains: domains.clone(),
        };
        cache.save_backoff(&backoff).unwrap();
        assert_eq!(cache.load_backoff(&domains).unwrap(), Some(backoff));
        assert_eq!(cache.load_backoff(&["b.example".to_owned()]).unwrap(), None);
        cache.clear_backoff().unwrap();
        cache.clear_backoff().unwrap();
        assert_eq!(cache.load_backoff(&domains).unwrap(), None);
    }

    #[test]
    fn a_challenge_certificate_carries_the_digest_in_a_critical_acme_identifier() {
        let pair = challenge_cert("a.example", &[7u8; 32]).unwrap();
        let (_, parsed) = x509_parser::parse_x509_certificate(&pair.cert[0]).unwrap();
        let ext = parsed
            .extensions()
            .iter()
            .find(|e| e.oid.to_id_string() == "1.3.6.1.5.5.7.1.31")
            .expect("acmeIdentifier extension");
        assert!(ext.critical);
        assert!(ext.value.ends_with(&[7u8; 32]));
    }
}
