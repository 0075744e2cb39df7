//! `[[sources.deliver]]`: where a source's events go, and how hard hookbox
//! tries.
//!
//! A source has zero or more destinations: an array of tables, or the
//! single table `[sources.deliver]` of earlier configs, which is one
//! destination named `default` ([`RawDestinations`]). Each is one kind
//! (the table of kinds is `super::destinations`): `url` (an HTTP POST or
//! PUT, signed the Standard Webhooks way when it has a `signing_secret`,
//! with `headers` of the user's: [`super::url_options`]), `command` (an
//! argv run without a shell), `pull`, or a broker (`super::broker`), with
//! an optional filter ([`super::route`]) and an optional jq `transform`
//! ([`super::transform`]): an event no destination matches is
//! kept as `stored`, not dispatched. [`validate_all`] turns the raw tables
//! into [`DeliverConfig`]s, resolving signing secrets to their HMAC keys,
//! and reports every problem under the key that has it. `crate::delivery::push`
//! is what uses the result.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::broker::amqp::{AmqpConfig, RawAmqp};
use super::broker::mqtt::{MqttConfig, RawMqtt};
use super::broker::nats::{NatsConfig, RawNats};
use super::broker::redis::{RawRedis, RedisConfig};
use super::route::Filter;
use super::secret::Secret;
use super::target_url::{TargetUrl, shown_reference};
use super::url_options::{self, Method, UrlOptions};
use super::{duration, limits, secret, transform};

/// The name of the one destination of a single `[sources.deliver]` table,
/// and of every delivery a database from before routes holds.
pub const DEFAULT_NAME: &str = "default";

/// A source's destinations as written: `[sources.deliver]` (one table) or
/// `[[sources.deliver]]` (an array of them). Kept apart so `hookbox check`
/// prints the config back in the form it was written.
#[derive(Clone, Debug, Default)]
pub enum RawDestinations {
    #[default]
    None,
    One(Box<RawDeliver>),
    Many(Vec<RawDeliver>),
}

impl RawDestinations {
    pub fn is_none(&self) -> bool {
        matches!(self, RawDestinations::None)
    }

    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, RawDeliver> {
        match self {
            RawDestinations::None => [].iter_mut(),
            RawDestinations::One(one) => std::slice::from_mut(one.as_mut()).iter_mut(),
            RawDestinations::Many(many) => many.iter_mut(),
        }
    }

    pub fn iter(&self) -> std::slice::Iter<'_, RawDeliver> {
        match self {
            RawDestinations::None => [].iter(),
            RawDestinations::One(one) => std::slice::from_ref(one.as_ref()).iter(),
            RawDestinations::Many(many) => many.iter(),
        }
    }
}

/// A table or an array of tables, read through serde's visitor so that an
/// error inside either keeps its place in the file.
impl<'de> Deserialize<'de> for RawDestinations {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = RawDestinations;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a destination table or an array of them")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                let one =
                    RawDeliver::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(RawDestinations::One(Box::new(one)))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                seq: A,
            ) -> Result<Self::Value, A::Error> {
                let many = Vec::<RawDeliver>::deserialize(
                    serde::de::value::SeqAccessDeserializer::new(seq),
                )?;
                Ok(RawDestinations::Many(many))
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl Serialize for RawDestinations {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            RawDestinations::None => s.serialize_none(),
            RawDestinations::One(one) => one.serialize(s),
            RawDestinations::Many(many) => many.serialize(s),
        }
    }
}

/// One destination table as written.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawDeliver {
    /// 1-64 of `a-z 0-9 - _`, unique in its source; required when the
    /// source has several destinations, `default` otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Program and arguments, run directly (no shell).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Nothing is pushed: consumers take deliveries through the pull API.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pull: Option<RawPull>,
    /// The broker kinds (`super::broker`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nats: Option<RawNats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis: Option<RawRedis>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amqp: Option<RawAmqp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mqtt: Option<RawMqtt>,
    /// Secret reference; a Standard Webhooks `whsec_` secret. Required with
    /// `url`, refused with `command`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signing_secret: Option<String>,
    /// Per attempt: the whole HTTP exchange, or the command's run time.
    #[serde(with = "duration")]
    pub timeout: Duration,
    /// Attempts in all, the first included, before the event goes `dead`.
    pub max_attempts: u32,
    #[serde(with = "duration")]
    pub backoff_base: Duration,
    #[serde(with = "duration")]
    pub backoff_cap: Duration,
    /// Attempts of this destination running at once; `None`: the kind's
    /// default ([`default_concurrency`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<usize>,
    /// HTTP statuses that send the event straight to `dead`.
    pub permanent_statuses: Vec<u16>,
    /// Most attempts per second or minute (`"50/s"`, `"600/m"`), spread
    /// evenly; none: as fast as `concurrency` allows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    /// Failed attempts in a row that pause the destination; 0: never.
    pub breaker_failures: u32,
    /// While paused, the wait before the first probe (doubling to 5 min).
    #[serde(with = "duration")]
    pub breaker_probe: Duration,
    /// Event-type globs; empty: every type.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<String>,
    /// JSON pointer → a value or a list of values, any of which matches.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub when: BTreeMap<String, toml::Value>,
    /// A jq program: what it outputs is what is sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transform: Option<String>,
    /// A url destination's HTTP method: POST (the default) or PUT.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<Method>,
    /// A url destination's own headers: name → secret reference or literal.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

impl Default for RawDeliver {
    fn default() -> Self {
        RawDeliver {
            name: None,
            url: None,
            command: None,
            pull: None,
            nats: None,
            redis: None,
            amqp: None,
            mqtt: None,
            signing_secret: None,
            timeout: Duration::from_secs(30),
            max_attempts: 12,
            backoff_base: Duration::from_secs(30),
            backoff_cap: Duration::from_secs(3600),
            concurrency: None,
            permanent_statuses: vec![400, 401, 403, 404, 410, 422],
            rate: None,
            breaker_failures: 10,
            breaker_probe: Duration::from_secs(30),
            events: Vec::new(),
            when: BTreeMap::new(),
            transform: None,
            method: None,
            headers: BTreeMap::new(),
        }
    }
}

/// Written by hand so a literal signing secret never reaches a log line.
impl fmt::Debug for RawDeliver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawDeliver")
            .field("name", &self.name)
            .field("url", &self.url.as_deref().map(shown_reference))
            .field("command", &self.command)
            .field("pull", &self.pull)
            .field("nats", &self.nats)
            .field("redis", &self.redis)
            .field("amqp", &self.amqp)
            .field("mqtt", &self.mqtt)
            .field(
                "signing_secret",
                &self.signing_secret.as_deref().map(secret::describe),
            )
            .field("timeout", &self.timeout)
            .field("max_attempts", &self.max_attempts)
            .field("backoff_base", &self.backoff_base)
            .field("backoff_cap", &self.backoff_cap)
            .field("concurrency", &self.concurrency)
            .field("permanent_statuses", &self.permanent_statuses)
            .field("rate", &self.rate)
            .field("breaker_failures", &self.breaker_failures)
            .field("breaker_probe", &self.breaker_probe)
            .field("events", &self.events)
            .field("when", &self.when)
            .field("transform", &self.transform)
            .field("method", &self.method)
            .field(
                "headers",
                &self
                    .headers
                    .iter()
                    .map(|(k, v)| (k, secret::describe(v)))
                    .collect::<BTreeMap<_, _>>(),
            )
            .finish()
    }
}

/// `pull = { token = "env:…" }`: what a consumer of the pull API needs.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawPull {
    /// Secret reference: the bearer token of `/pull/{source}/{name}`.
    pub token: String,
    /// Most body bytes in one answer (one event always fits).
    #[serde(default = "default_pull_max_bytes")]
    pub max_bytes: u64,
}

fn default_pull_max_bytes() -> u64 {
    10 * 1024 * 1024
}

/// Written by hand so a literal token never reaches a log line.
impl fmt::Debug for RawPull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawPull")
            .field("token", &secret::describe(&self.token))
            .field("max_bytes", &self.max_bytes)
            .finish()
    }
}

/// The shortest pull token: it is a password anyone on the internet can try.
pub const MIN_PULL_TOKEN: usize = 16;

/// A validated destination with its retry policy.
#[derive(Debug, Clone)]
pub struct DeliverConfig {
    /// Unique in its source; [`DEFAULT_NAME`] for a single table.
    pub name: String,
    pub destination: Destination,
    /// Which events go here; an event no destination takes is `stored`.
    pub filter: Filter,
    pub timeout: Duration,
    pub max_attempts: u32,
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    pub concurrency: usize,
    pub permanent_statuses: Vec<u16>,
    /// The least time between two attempts' starts; `None`: no limit.
    pub rate: Option<Duration>,
    /// `None`: failures never pause the destination.
    pub breaker_failures: Option<u32>,
    pub breaker_probe: Duration,
    /// The jq program whose output is sent instead of the body; checked
    /// at load, compiled by whoever runs it.
    pub transform: Option<std::sync::Arc<str>>,
}

#[derive(Clone, PartialEq, Eq)]
pub enum Destination {
    /// POST (or PUT) to an http(s) URL; `signing_key` is the HMAC key
    /// decoded from the `whsec_` secret, `None`: sent unsigned.
    Url {
        url: TargetUrl,
        signing_key: Option<Vec<u8>>,
        options: UrlOptions,
    },
    /// Run `argv[0]` with the rest as arguments; never empty. `template`
    /// is the same argv with its placeholders parsed.
    Command {
        argv: Vec<String>,
        template: super::argv::Template,
    },
    /// Deliveries wait for a consumer of the pull API holding `token`.
    Pull {
        token: Secret,
        max_bytes: u64,
    },
    Nats(NatsConfig),
    Redis(RedisConfig),
    Amqp(AmqpConfig),
    Mqtt(MqttConfig),
}

/// Written by hand: the key is shown as `[redacted]`.
impl fmt::Debug for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Destination::Url { url, options, .. } => f
                .debug_struct("Url")
                .field("url", url)
                .field("signing_key", &"[redacted]")
                .field("options", options)
                .finish(),
            Destination::Command { argv, .. } => {
                f.debug_struct("Command").field("argv", argv).finish()
            }
            Destination::Pull { max_bytes, .. } => f
                .debug_struct("Pull")
                .field("token", &"[redacted]")
                .field("max_bytes", max_bytes)
                .finish(),
            Destination::Nats(c) => c.fmt(f),
            Destination::Redis(c) => c.fmt(f),
            Destination::Amqp(c) => c.fmt(f),
            Destination::Mqtt(c) => c.fmt(f),
        }
    }
}

/// Checks a source's destinations; `at` is the source's key
/// (`sources[0] ("github")`). Pushes every problem found and returns the
/// destinations only when there is none.
pub fn validate_all(
    raw: &RawDestinations,
    at: &str,
    problems: &mut Vec<String>,
) -> Option<Vec<DeliverConfig>> {
    let before = problems.len();
    let found: Vec<Option<DeliverConfig>> = match raw {
        RawDestinations::None => Vec::new(),
        RawDestinations::One(one) => {
            let at = format!("{at}.deliver");
            let name = one.name.as_deref().unwrap_or(DEFAULT_NAME);
            vec![validate(one, name, &at, problems)]
        }
        RawDestinations::Many(many) => {
            let mut seen = std::collections::BTreeSet::new();
            many.iter()
                .enumerate()
                .map(|(i, one)| {
                    let at = match &one.name {
                        Some(name) => format!("{at}.deliver[{i}] ({name:?})"),
                        None => format!("{at}.deliver[{i}]"),
                    };
                    let name = match (&one.name, many.len()) {
                        (Some(name), _) => name.as_str(),
                        (None, 1) => DEFAULT_NAME,
                        (None, _) => {
                            problems.push(format!(
                                "{at}.name: required when a source has several destinations"
                            ));
                            ""
                        }
                    };
                    if !name.is_empty() && !seen.insert(name) {
                        problems.push(format!("{at}.name: {name:?} is used twice in this source"));
                    }
                    validate(one, name, &at, problems)
                })
                .collect()
        }
    };
    (problems.len() == before).then(|| found.into_iter().flatten().collect())
}

/// Whether `name` may name a destination: it appears in metrics labels,
/// URLs and `HOOKBOX_DESTINATION`.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Checks one destination table named `name`; `at` is its key.
fn validate(
    raw: &RawDeliver,
    name: &str,
    at: &str,
    problems: &mut Vec<String>,
) -> Option<DeliverConfig> {
    let before = problems.len();
    if raw.name.is_some() && !valid_name(name) {
        problems.push(format!(
            "{at}.name: use 1-64 characters from a-z, 0-9, '-' and '_'"
        ));
    }
    let filter = Filter::parse(&raw.events, &raw.when, at, problems);
    let destination = super::destinations::validate(raw, at, problems);
    if raw.url.is_none() {
        url_options::refuse(raw.method, &raw.headers, at, "this destination", problems);
    }
    if raw.pull.is_some() && raw.transform.is_some() {
        problems.push(format!(
            "{at}.transform: not for pull destinations (a consumer takes the event as received; transform it there, or use a url or command destination)"
        ));
    }
    limits::DELIVER_TIMEOUT.check(at, raw.timeout, problems);
    limits::DELIVER_MAX_ATTEMPTS.check(at, raw.max_attempts, problems);
    limits::DELIVER_BACKOFF_BASE.check(at, raw.backoff_base, problems);
    limits::DELIVER_BACKOFF_CAP.check(at, raw.backoff_cap, problems);
    if let Some(concurrency) = raw.concurrency {
        limits::DELIVER_CONCURRENCY.check(at, concurrency, problems);
    }
    limits::DELIVER_BREAKER_FAILURES.check(at, raw.breaker_failures, problems);
    limits::DELIVER_BREAKER_PROBE.check(at, raw.breaker_probe, problems);
    if raw.backoff_base > raw.backoff_cap {
        problems.push(format!(
            "{at}.backoff_base: must not be longer than backoff_cap ({})",
            humantime::format_duration(raw.backoff_cap)
        ));
    }
    for (j, status) in raw.permanent_statuses.iter().enumerate() {
        if !(300..=599).contains(status) {
            problems.push(format!(
                "{at}.permanent_statuses[{j}]: {status} is not a failure status (300-599)"
            ));
        }
    }
    if let Some(code) = &raw.transform {
        transform::check(code, at, problems);
    }
    let rate = raw.rate.as_deref().and_then(|r| match parse_rate(r) {
        Ok(spacing) => Some(spacing),
        Err(why) => {
            problems.push(format!("{at}.rate: {r:?} {why}"));
            None
        }
    });
    let concurrency = raw
        .concurrency
        .or_else(|| destination.as_ref().map(default_concurrency))
        .unwrap_or(DEFAULT_CONCURRENCY);
    (problems.len() == before).then(|| DeliverConfig {
        name: name.to_owned(),
        rate,
        breaker_failures: (raw.breaker_failures > 0).then_some(raw.breaker_failures),
        breaker_probe: raw.breaker_probe,
        destination: destination.expect("no problems means the destination was built"),
        filter: filter.expect("no problems means the filter was built"),
        timeout: raw.timeout,
        max_attempts: raw.max_attempts,
        backoff_base: raw.backoff_base,
        backoff_cap: raw.backoff_cap,
        concurrency,
        permanent_statuses: raw.permanent_statuses.clone(),
        transform: raw.transform.as_deref().map(std::sync::Arc::from),
    })
}

/// A command or pull destination's `concurrency` when its table gives none.
pub const DEFAULT_CONCURRENCY: usize = 4;

/// A url destination's `concurrency` when its table gives none. An attempt
/// to a nearby endpoint is mostly waiting (a round trip, a body read), so
/// four in flight bound delivery below what ingest accepts (2,900/s
/// against 3,000/s at a quarter of the disk's floor, the backlog growing,
/// on the benchmark page); sixteen keep pace there. A command
/// costs its host more per attempt, and keeps [`DEFAULT_CONCURRENCY`]; a
/// broker kind pipelines its publishes on one connection and has
/// `super::broker::CONCURRENCY`.
pub const DEFAULT_URL_CONCURRENCY: usize = 16;

/// What `concurrency` a destination of this kind has when its table gives
/// none.
pub fn default_concurrency(destination: &Destination) -> usize {
    match destination {
        Destination::Url { .. } => DEFAULT_URL_CONCURRENCY,
        Destination::Nats(_)
        | Destination::Redis(_)
        | Destination::Amqp(_)
        | Destination::Mqtt(_) => super::broker::CONCURRENCY,
        _ => DEFAULT_CONCURRENCY,
    }
}

/// The `url` kind (`super::destinations`).
pub(super) fn url_kind(
    raw: &RawDeliver,
    at: &str,
    problems: &mut Vec<String>,
) -> Option<Destination> {
    let options = url_options::validate(raw.method, &raw.headers, at, problems);
    let (url, signing_key) = url_destination(
        raw.url.as_deref()?,
        raw.signing_secret.as_deref(),
        at,
        problems,
    )?;
    Some(Destination::Url {
        url,
        signing_key,
        options: options?,
    })
}

/// The `command` kind.
pub(super) fn command_kind(
    raw: &RawDeliver,
    at: &str,
    problems: &mut Vec<String>,
) -> Option<Destination> {
    command_destination(raw.command.as_deref()?, at, problems)
}

/// The `pull` kind.
pub(super) fn pull_kind(
    raw: &RawDeliver,
    at: &str,
    problems: &mut Vec<String>,
) -> Option<Destination> {
    pull_destination(raw.pull.as_ref()?, at, problems)
}

/// The URL and the signing key (`None`: unsigned) of a url destination.
fn url_destination(
    url: &str,
    signing_secret: Option<&str>,
    at: &str,
    problems: &mut Vec<String>,
) -> Option<(TargetUrl, Option<Vec<u8>>)> {
    let parsed = TargetUrl::resolve(url, &format!("{at}.url"), problems);
    // Without a secret the request goes unsigned (a chat webhook cannot
    // verify one); `hookbox check` warns of it (`warnings`).
    let Some(reference) = signing_secret else {
        return parsed.map(|url| (url, None));
    };
    let key = match secret::resolve(reference) {
        Ok(s) => s.standard_key().or_else(|| {
            problems.push(format!(
                "{at}.signing_secret ({}): a Standard Webhooks secret is `whsec_` followed by base64",
                secret::describe(reference)
            ));
            None
        }),
        Err(why) => {
            problems.push(format!(
                "{at}.signing_secret ({}): {why}",
                secret::describe(reference)
            ));
            None
        }
    };
    Some((parsed?, Some(key?)))
}

/// What `hookbox check` says of a valid destination that may not do what
/// its user meant: a url destination without a `signing_secret`.
pub fn warnings(raw: &RawDestinations, at: &str) -> Vec<String> {
    raw.iter()
        .enumerate()
        .filter(|(_, d)| d.url.is_some() && d.signing_secret.is_none())
        .map(|(i, d)| {
            let name = d.name.as_deref().unwrap_or(DEFAULT_NAME);
            let key = match raw {
                RawDestinations::Many(_) => format!("{at}.deliver[{i}] ({name:?})"),
                _ => format!("{at}.deliver"),
            };
            format!(
                "{key}: no signing_secret, so requests go unsigned: the receiver cannot tell hookbox from anyone else who knows the URL"
            )
        })
        .collect()
}

/// The most attempts a rate may allow per second (a million a minute and
/// more is no limit for one destination).
const MAX_RATE_PER_SEC: u64 = 10_000;

/// `"N/s"` or `"N/m"` as the spacing between two starts.
fn parse_rate(text: &str) -> Result<Duration, String> {
    const FORM: &str =
        "is not a rate: write attempts per second or minute, e.g. \"50/s\" or \"600/m\"";
    let (n, unit) = text.trim().split_once('/').ok_or(FORM)?;
    let n: u64 = n.trim().parse().map_err(|_| FORM)?;
    let per = match unit.trim() {
        "s" => Duration::from_secs(1),
        "m" => Duration::from_secs(60),
        _ => return Err(FORM.to_owned()),
    };
    if n == 0 {
        return Err("allows nothing: at least 1 (leave rate out for no limit)".to_owned());
    }
    if n.saturating_mul(Duration::from_secs(1).as_nanos() as u64) / (per.as_nanos() as u64)
        > MAX_RATE_PER_SEC
    {
        return Err(format!("is over the maximum of {MAX_RATE_PER_SEC}/s"));
    }
    Ok(per / u32::try_from(n).map_err(|_| FORM)?)
}

fn pull_destination(pull: &RawPull, at: &str, problems: &mut Vec<String>) -> Option<Destination> {
    let at = format!("{at}.pull");
    limits::PULL_MAX_BYTES.check(&at, pull.max_bytes, problems);
    match secret::resolve(&pull.token) {
        Ok(token) if token.expose().len() < MIN_PULL_TOKEN => {
            problems.push(format!(
                "{at}.token ({}): at least {MIN_PULL_TOKEN} characters (it guards the events on the public listener)",
                secret::describe(&pull.token)
            ));
            None
        }
        Ok(token) => Some(Destination::Pull {
            token,
            max_bytes: pull.max_bytes,
        }),
        Err(why) => {
            problems.push(format!(
                "{at}.token ({}): {why}",
                secret::describe(&pull.token)
            ));
            None
        }
    }
}

fn command_destination(
    argv: &[String],
    at: &str,
    problems: &mut Vec<String>,
) -> Option<Destination> {
    match argv.first() {
        None => {
            problems.push(format!(
                "{at}.command: must name a program, e.g. [\"/usr/local/bin/handler\"]"
            ));
            None
        }
        Some(program) if program.is_empty() => {
            problems.push(format!("{at}.command[0]: the program must not be empty"));
            None
        }
        Some(_) => match super::argv::Template::parse(argv) {
            Ok(template) => Some(Destination::Command {
                argv: argv.to_vec(),
                template,
            }),
            Err((i, why)) => {
                problems.push(format!("{at}.command[{i}]: {why}"));
                None
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_a_spacing_between_starts() {
        assert_eq!(parse_rate("50/s"), Ok(Duration::from_millis(20)));
        assert_eq!(parse_rate(" 600 / m "), Ok(Duration::from_millis(100)));
        assert_eq!(parse_rate("1/m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_rate("10000/s"), Ok(Duration::from_micros(100)));
        for bad in [
            "", "50", "50/h", "x/s", "-1/s", "0/s", "10001/s", "1.5/s", "/s",
        ] {
            assert!(parse_rate(bad).is_err(), "{bad:?}");
        }
    }
}
