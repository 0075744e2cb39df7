//! `[edge]`, `server.trusted_proxies` and each source's `allow_ips`: who
//! may talk to the public listener, and how hard.
//!
//! This module only parses and checks; `crate::edge` applies the result
//! (client address, allowlists, failure limits) and fetches the named IP
//! sets from the URLs configured here.

use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::{RawServer, duration, limits};

/// GitHub's meta API; its `hooks` key lists the webhook source ranges.
pub const GITHUB_META_URL: &str = "https://api.github.com/meta";
/// Stripe's published webhook source addresses (`{"WEBHOOKS": [...]}`).
pub const STRIPE_IPS_URL: &str = "https://stripe.com/files/ips/ips_webhooks.json";

/// `[edge]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawEdge {
    /// Where the `"github"` set comes from (`https://HOST/api/v3/meta` on
    /// GitHub Enterprise Server).
    pub github_meta_url: String,
    /// Where the `"stripe"` set comes from.
    pub stripe_ips_url: String,
    /// How often the named sets are fetched again.
    #[serde(with = "duration")]
    pub refresh: Duration,
    /// Failed verifications (401s) from one address within
    /// `failure_window` that get it blocked; 0 turns the limit off.
    pub max_failures: u32,
    #[serde(with = "duration")]
    pub failure_window: Duration,
    /// How long a blocked address gets 429.
    #[serde(with = "duration")]
    pub block_for: Duration,
    /// Most addresses the failure limit remembers; the least recently seen
    /// go first, so memory stays bounded under a flood of addresses.
    pub max_tracked: usize,
    /// Bytes of request bodies one client address may hold at once, of
    /// the process's 256 MiB; never less than the largest body a source
    /// accepts.
    pub max_client_body_bytes: u64,
    /// Request bodies one client address may have being read at once.
    pub max_client_bodies: u32,
    /// Pull long-polls one client address may hold waiting at once.
    pub max_client_long_polls: u32,
}

impl Default for RawEdge {
    fn default() -> Self {
        RawEdge {
            github_meta_url: GITHUB_META_URL.to_owned(),
            stripe_ips_url: STRIPE_IPS_URL.to_owned(),
            refresh: Duration::from_secs(24 * 3600),
            max_failures: 20,
            failure_window: Duration::from_secs(60),
            block_for: Duration::from_secs(300),
            max_tracked: 10_000,
            max_client_body_bytes: 64 * 1024 * 1024,
            max_client_bodies: 32,
            max_client_long_polls: 16,
        }
    }
}

/// Which header a trusted proxy's client address is read from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ForwardedHeader {
    /// `X-Forwarded-For`: what nginx, Caddy, HAProxy and cloud load
    /// balancers set.
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=...`.
    Forwarded,
}

/// A provider's published list of source addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NamedSet {
    Github,
    Stripe,
}

impl NamedSet {
    pub const ALL: [NamedSet; 2] = [NamedSet::Github, NamedSet::Stripe];

    pub fn as_str(self) -> &'static str {
        match self {
            NamedSet::Github => "github",
            NamedSet::Stripe => "stripe",
        }
    }
}

/// A source's validated `allow_ips`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowIps {
    pub nets: Vec<IpNet>,
    pub sets: Vec<NamedSet>,
}

/// The validated edge settings.
#[derive(Debug, Clone)]
pub struct EdgeConfig {
    pub trusted_proxies: Vec<IpNet>,
    pub forwarded_header: ForwardedHeader,
    pub github_meta_url: String,
    pub stripe_ips_url: String,
    pub refresh: Duration,
    pub max_failures: u32,
    pub failure_window: Duration,
    pub block_for: Duration,
    pub max_tracked: usize,
    pub max_client_body_bytes: u64,
    pub max_client_bodies: u32,
    pub max_client_long_polls: u32,
}

/// A CIDR (`192.0.2.0/24`, `2001:db8::/32`) or a bare address (a /32 or
/// /128). Host bits are cleared: `192.0.2.7/24` means `192.0.2.0/24`.
pub fn parse_net(text: &str) -> Result<IpNet, String> {
    let text = text.trim();
    if let Ok(net) = text.parse::<IpNet>() {
        return Ok(net.trunc());
    }
    text.parse::<std::net::IpAddr>()
        .map(IpNet::from)
        .map_err(|_| format!("{text:?} is neither an address nor a CIDR like \"192.0.2.0/24\""))
}

pub fn validate(edge: &RawEdge, server: &RawServer, problems: &mut Vec<String>) -> EdgeConfig {
    let mut trusted_proxies = Vec::new();
    for (i, text) in server.trusted_proxies.iter().enumerate() {
        match parse_net(text) {
            Ok(net) => trusted_proxies.push(net),
            Err(why) => problems.push(format!("server.trusted_proxies[{i}]: {why}")),
        }
    }
    limits::MAX_CONNECTIONS.check("server", server.max_connections, problems);
    for (key, url) in [
        ("edge.github_meta_url", &edge.github_meta_url),
        ("edge.stripe_ips_url", &edge.stripe_ips_url),
    ] {
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            problems.push(format!("{key}: {url:?} is not an http(s) URL"));
        }
    }
    limits::EDGE_REFRESH.check("edge", edge.refresh, problems);
    limits::EDGE_MAX_FAILURES.check("edge", edge.max_failures, problems);
    limits::EDGE_FAILURE_WINDOW.check("edge", edge.failure_window, problems);
    limits::EDGE_BLOCK_FOR.check("edge", edge.block_for, problems);
    limits::EDGE_MAX_TRACKED.check("edge", edge.max_tracked, problems);
    limits::EDGE_MAX_CLIENT_BODY_BYTES.check("edge", edge.max_client_body_bytes, problems);
    limits::EDGE_MAX_CLIENT_BODIES.check("edge", edge.max_client_bodies, problems);
    limits::EDGE_MAX_CLIENT_LONG_POLLS.check("edge", edge.max_client_long_polls, problems);
    EdgeConfig {
        trusted_proxies,
        forwarded_header: server.forwarded_header,
        github_meta_url: edge.github_meta_url.clone(),
        stripe_ips_url: edge.stripe_ips_url.clone(),
        refresh: edge.refresh,
        max_failures: edge.max_failures,
        failure_window: edge.failure_window,
        block_for: edge.block_for,
        max_tracked: edge.max_tracked,
        max_client_body_bytes: edge.max_client_body_bytes,
        max_client_bodies: edge.max_client_bodies,
        max_client_long_polls: edge.max_client_long_polls,
    }
}

/// A source's `allow_ips`: `None` when empty (every address may post).
pub fn validate_allow_ips(
    list: &[String],
    at: &str,
    problems: &mut Vec<String>,
) -> Option<AllowIps> {
    if list.is_empty() {
        return None;
    }
    let mut allow = AllowIps::default();
    for (i, entry) in list.iter().enumerate() {
        if let Some(set) = NamedSet::ALL.into_iter().find(|s| s.as_str() == entry) {
            if !allow.sets.contains(&set) {
                allow.sets.push(set);
            }
            continue;
        }
        match parse_net(entry) {
            Ok(net) => allow.nets.push(net),
            Err(why) => problems.push(format!(
                "{at}.allow_ips[{i}]: {why} (or one of the named sets \"github\", \"stripe\")"
            )),
        }
    }
    Some(allow)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nets_parse_from_cidrs_and_bare_addresses() {
        assert_eq!(
            parse_net("192.0.2.7/24").unwrap().to_string(),
            "192.0.2.0/24"
        );
        assert_eq!(
            parse_net("3.18.12.63").unwrap().to_string(),
            "3.18.12.63/32"
        );
        assert_eq!(
            parse_net("2001:db8::1").unwrap().to_string(),
            "2001:db8::1/128"
        );
        assert!(parse_net("github.com").is_err());
        assert!(parse_net("10.0.0.0/33").is_err());
    }

    #[test]
    fn allow_ips_mixes_named_sets_and_cidrs_and_names_bad_entries() {
        let mut problems = Vec::new();
        let list = ["github", "10.0.0.0/8", "stripe", "github", "nope"].map(String::from);
        let allow = validate_allow_ips(&list, "sources[0]", &mut problems).unwrap();
        assert_eq!(allow.sets, vec![NamedSet::Github, NamedSet::Stripe]);
        assert_eq!(allow.nets.len(), 1);
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].starts_with("sources[0].allow_ips[4]"),
            "{problems:?}"
        );
        assert!(validate_allow_ips(&[], "x", &mut problems).is_none());
    }

    #[test]
    fn edge_settings_are_checked_by_key() {
        let server = RawServer {
            trusted_proxies: vec!["10.0.0.0/8".into(), "proxy".into()],
            max_connections: 0,
            ..RawServer::default()
        };
        let edge = RawEdge {
            block_for: Duration::ZERO,
            github_meta_url: "ftp://x".into(),
            max_client_body_bytes: 0,
            max_client_bodies: 0,
            ..RawEdge::default()
        };
        let mut problems = Vec::new();
        let cfg = validate(&edge, &server, &mut problems);
        assert_eq!(cfg.trusted_proxies.len(), 1);
        let text = problems.join("\n");
        for key in [
            "server.trusted_proxies[1]",
            "server.max_connections",
            "edge.github_meta_url",
            "edge.block_for",
            "edge.max_client_body_bytes",
            "edge.max_client_bodies",
        ] {
            assert!(text.contains(key), "no {key} in {text}");
        }
    }
}
