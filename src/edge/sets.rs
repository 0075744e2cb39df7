//! The named IP sets (`allow_ips = ["github", "stripe"]`): fetched from the
//! providers at start-up and every `edge.refresh` (daily by default), and
//! cached in the database (`ip_sets`) so a restart without network still
//! knows them.
//!
//! At start-up a set comes from the network, else from the cache, else it
//! is unavailable: its sources then refuse every address outside their
//! CIDRs (403), and an error is logged naming the set and the sources, until
//! a refresh succeeds, retried from 30 s on, doubling up to an hour. Start-up
//! does not fail on it: failing would take the other sources down with the
//! one that cannot be checked. A refresh that fails keeps the list in use.
//!
//! GitHub: `GET {edge.github_meta_url}` → `{"hooks": ["192.30.252.0/22", ...]}`
//! (<https://docs.github.com/en/rest/meta/meta>). Stripe:
//! `GET {edge.stripe_ips_url}` → `{"WEBHOOKS": ["3.18.12.63", ...]}`
//! (<https://docs.stripe.com/ips>).

use std::net::IpAddr;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use anyhow::{Context, bail};
use ipnet::IpNet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{EdgeConfig, NamedSet, parse_net};
use crate::store::ip_sets::{self, CachedSet};
use crate::store::{Store, WriterHandle};
use crate::support::clock;
use crate::telemetry::metrics::EdgeMetrics;

/// What one fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(15);
/// The longest wait between retries of a set with no list.
const MAX_RETRY: Duration = Duration::from_secs(3600);

/// The current list of each named set; `None` until one is known.
#[derive(Debug, Default)]
pub struct NamedSets {
    github: RwLock<Option<Arc<[IpNet]>>>,
    stripe: RwLock<Option<Arc<[IpNet]>>>,
}

impl NamedSets {
    fn slot(&self, set: NamedSet) -> &RwLock<Option<Arc<[IpNet]>>> {
        match set {
            NamedSet::Github => &self.github,
            NamedSet::Stripe => &self.stripe,
        }
    }

    /// `None` when the set is unknown (never fetched, nothing cached).
    pub fn contains(&self, set: NamedSet, ip: IpAddr) -> Option<bool> {
        let list = self
            .slot(set)
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()?;
        Some(list.iter().any(|net| net.contains(&ip)))
    }

    pub fn install(&self, set: NamedSet, nets: Vec<IpNet>) {
        *self
            .slot(set)
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(nets.into());
    }

    pub fn is_known(&self, set: NamedSet) -> bool {
        self.slot(set)
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }
}

/// Fetches, caches and installs the named sets; shared by start-up and the
/// refresh loop.
pub struct Refresher {
    pub sets: Arc<NamedSets>,
    /// The sets some source uses, with those sources' names (for logs).
    pub used: Vec<(NamedSet, Vec<String>)>,
    config: EdgeConfig,
    client: reqwest::Client,
    writer: WriterHandle,
    metrics: EdgeMetrics,
}

impl Refresher {
    pub fn new(
        sets: Arc<NamedSets>,
        used: Vec<(NamedSet, Vec<String>)>,
        config: &EdgeConfig,
        writer: WriterHandle,
        metrics: EdgeMetrics,
    ) -> anyhow::Result<Self> {
        // The lists are public and carry no secret: a move of the file
        // (a redirect) is followed, unlike everywhere else.
        let client = crate::support::outbound::build(|| {
            crate::support::outbound::builder()
                .timeout(FETCH_TIMEOUT)
                .redirect(reqwest::redirect::Policy::limited(5))
        })
        .context("building the HTTP client for the IP sets")?;
        Ok(Refresher {
            sets,
            used,
            config: config.clone(),
            client,
            writer,
            metrics,
        })
    }

    fn url(&self, set: NamedSet) -> &str {
        match set {
            NamedSet::Github => &self.config.github_meta_url,
            NamedSet::Stripe => &self.config.stripe_ips_url,
        }
    }

    /// Start-up: each used set from the network, else from the cache.
    pub async fn start(&self, store: &Store) {
        for (set, sources) in &self.used {
            let set = *set;
            match self.fetch_and_cache(set).await {
                Ok(n) => tracing::info!(set = set.as_str(), ranges = n, "fetched the IP set"),
                Err(e) => {
                    let name = set.as_str();
                    let cached = store
                        .read(move |conn| ip_sets::load(conn, name))
                        .await
                        .and_then(|c| c.map(|c| decode(&c).map(|n| (n, c.fetched_at))).transpose());
                    match cached {
                        Ok(Some((nets, fetched_at))) => {
                            let age_h = (clock::now_ms() - fetched_at).max(0) / 3_600_000;
                            tracing::warn!(
                                set = name,
                                error = format!("{e:#}"),
                                age_hours = age_h,
                                "cannot fetch the IP set; using the cached list"
                            );
                            self.metrics.set_ranges(name, nets.len());
                            self.sets.install(set, nets);
                        }
                        other => {
                            let cache_error = other.err().map(|e| format!("{e:#}"));
                            tracing::error!(
                                set = name,
                                sources = sources.join(","),
                                error = format!("{e:#}"),
                                cache_error,
                                "cannot fetch the IP set and none is cached: these sources refuse every address outside their CIDRs (403) until a refresh succeeds"
                            );
                            self.metrics.set_ranges(name, 0);
                        }
                    }
                }
            }
        }
    }

    /// Every `edge.refresh`: fetch each used set again; a failure keeps
    /// the list in use. A set with no list at all (never fetched, nothing
    /// cached) is its sources' outage, so it is retried sooner: after
    /// [`first_retry`], doubling up to an hour or `edge.refresh`.
    pub async fn run(self, shutdown: CancellationToken) {
        let refresh = self.config.refresh;
        let first_retry = first_retry(refresh);
        let mut retry = first_retry;
        let mut next_refresh = Instant::now() + refresh;
        loop {
            let missing = self.missing();
            let wake = if missing.is_empty() {
                next_refresh
            } else {
                next_refresh.min(Instant::now() + retry)
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep_until(wake) => {}
            }
            let due = if Instant::now() >= next_refresh {
                next_refresh = Instant::now() + refresh;
                self.used.iter().map(|(set, _)| *set).collect()
            } else {
                retry = retry.saturating_mul(2).min(refresh.min(MAX_RETRY));
                missing
            };
            for set in due {
                self.refresh(set).await;
            }
            if self.missing().is_empty() {
                retry = first_retry;
            }
        }
    }

    /// The used sets with no list.
    fn missing(&self) -> Vec<NamedSet> {
        self.used
            .iter()
            .map(|(set, _)| *set)
            .filter(|set| !self.sets.is_known(*set))
            .collect()
    }

    async fn refresh(&self, set: NamedSet) {
        let known = self.sets.is_known(set);
        match self.fetch_and_cache(set).await {
            Ok(n) if known => {
                tracing::debug!(set = set.as_str(), ranges = n, "refreshed the IP set")
            }
            Ok(n) => tracing::info!(
                set = set.as_str(),
                ranges = n,
                "fetched the IP set; its sources admit its ranges again"
            ),
            Err(e) if known => tracing::warn!(
                set = set.as_str(),
                error = format!("{e:#}"),
                "cannot refresh the IP set; keeping the list in use"
            ),
            Err(e) => tracing::error!(
                set = set.as_str(),
                error = format!("{e:#}"),
                "cannot fetch the IP set; its sources still refuse every address outside their CIDRs"
            ),
        }
    }

    async fn fetch_and_cache(&self, set: NamedSet) -> anyhow::Result<usize> {
        let url = self.url(set);
        let response = self
            .client
            .get(url)
            .header("accept", "application/json")
            .send()
            .await
            .with_context(|| format!("GET {url}"))?;
        let status = response.status();
        if !status.is_success() {
            bail!("GET {url} answered {status}");
        }
        let body: serde_json::Value = response
            .json()
            .await
            .with_context(|| format!("reading the JSON of {url}"))?;
        let nets = parse(set, &body).with_context(|| format!("reading the list of {url}"))?;
        let n = nets.len();
        let ranges =
            serde_json::to_string(&nets.iter().map(ToString::to_string).collect::<Vec<_>>())
                .context("encoding the IP set")?;
        self.metrics.set_ranges(set.as_str(), n);
        self.sets.install(set, nets);
        let cached = CachedSet {
            ranges,
            fetched_at: clock::now_ms(),
        };
        let save = crate::store::ip_sets::Save {
            name: set.as_str().to_owned(),
            set: cached,
        };
        if let Err(e) = self.writer.write(save).await {
            // The list is in use; only the next restart without network misses it.
            tracing::warn!(set = set.as_str(), error = %e, "cannot cache the IP set");
        }
        Ok(n)
    }
}

/// The first retry of a set with no list: 30 s, or sooner when
/// `edge.refresh` is short (a 48th of it), so tests need not wait.
fn first_retry(refresh: Duration) -> Duration {
    (refresh / 48).min(Duration::from_secs(30))
}

/// The sets some source uses, each with its sources.
pub fn used(config: &crate::config::Config) -> Vec<(NamedSet, Vec<String>)> {
    NamedSet::ALL
        .into_iter()
        .filter_map(|set| {
            let sources: Vec<String> = config
                .sources
                .iter()
                .filter(|s| s.allow_ips.as_ref().is_some_and(|a| a.sets.contains(&set)))
                .map(|s| s.name.clone())
                .collect();
            (!sources.is_empty()).then_some((set, sources))
        })
        .collect()
}

/// The ranges in a provider's answer: GitHub's `hooks`, Stripe's
/// `WEBHOOKS`. Entries that do not parse are skipped (and logged); an
/// answer without one usable range is an error, so it never replaces a
/// good list.
pub fn parse(set: NamedSet, body: &serde_json::Value) -> anyhow::Result<Vec<IpNet>> {
    let key = match set {
        NamedSet::Github => "hooks",
        NamedSet::Stripe => "WEBHOOKS",
    };
    let Some(items) = body.get(key).and_then(|v| v.as_array()) else {
        bail!("no {key:?} array in the answer");
    };
    let mut nets = Vec::new();
    for item in items {
        match item.as_str().map(parse_net) {
            Some(Ok(net)) => nets.push(net),
            _ => tracing::warn!(set = set.as_str(), entry = %item, "skipped an unreadable range"),
        }
    }
    if nets.is_empty() {
        bail!("the {key:?} array holds no usable range");
    }
    Ok(nets)
}

fn decode(cached: &CachedSet) -> anyhow::Result<Vec<IpNet>> {
    let items: Vec<String> =
        serde_json::from_str(&cached.ranges).context("decoding the cached IP set")?;
    items
        .iter()
        .map(|s| parse_net(s).map_err(anyhow::Error::msg))
        .collect::<anyhow::Result<_>>()
        .context("decoding the cached IP set")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn provider_answers_parse_into_ranges() {
        let github = json!({"hooks": ["192.30.252.0/22", "2a0a:a440::/29"], "web": ["1.1.1.1/32"]});
        let nets = parse(NamedSet::Github, &github).unwrap();
        assert_eq!(nets.len(), 2);
        let stripe = json!({"WEBHOOKS": ["3.18.12.63", "bogus", "13.235.14.237"]});
        let nets = parse(NamedSet::Stripe, &stripe).unwrap();
        assert_eq!(nets[0].to_string(), "3.18.12.63/32");
        assert_eq!(nets.len(), 2);
        assert!(parse(NamedSet::Github, &json!({"hooks": []})).is_err());
        assert!(parse(NamedSet::Stripe, &json!({"hooks": ["10.0.0.0/8"]})).is_err());
    }

    #[test]
    fn an_unknown_set_matches_nothing_and_a_known_one_matches_its_ranges() {
        let sets = NamedSets::default();
        let ip: IpAddr = "192.30.252.7".parse().unwrap();
        assert_eq!(sets.contains(NamedSet::Github, ip), None);
        sets.install(NamedSet::Github, vec!["192.30.252.0/22".parse().unwrap()]);
        assert_eq!(sets.contains(NamedSet::Github, ip), Some(true));
        assert_eq!(
            sets.contains(NamedSet::Github, "10.0.0.1".parse().unwrap()),
            Some(false)
        );
    }

    #[test]
    fn cached_lists_round_trip() {
        let cached = CachedSet {
            ranges: "[\"192.30.252.0/22\",\"3.18.12.63/32\"]".into(),
            fetched_at: 0,
        };
        assert_eq!(decode(&cached).unwrap().len(), 2);
    }
}
