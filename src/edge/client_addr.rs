//! Who the client is: the TCP peer, or, when the peer is a trusted proxy,
//! the address its forwarding header names.
//!
//! Only a peer inside `server.trusted_proxies` is believed, and only the
//! one header `server.forwarded_header` names (`X-Forwarded-For` by
//! default, or RFC 7239 `Forwarded`): a proxy that manages one header
//! passes the other through from the client untouched, so reading both
//! would let a client choose its own address. Each proxy appends the
//! address it received from, so the header is read from the right,
//! skipping trusted hops; the first untrusted hop is the client. Entries to
//! its left were written by the client itself and are ignored. When every
//! hop is trusted, the leftmost is the client.
//!
//! A header that cannot be read, or a client hop that is obfuscated
//! (`for=_hidden`, `for=unknown`), leaves the peer as the client; the
//! caller counts those fallbacks.

use std::net::{IpAddr, SocketAddr};

use axum::http::HeaderMap;
use ipnet::IpNet;

use crate::config::ForwardedHeader;

/// The resolved client, and why the peer was used if a header was expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr {
    pub ip: IpAddr,
    /// `Some` when a trusted peer's header could not name the client:
    /// `"malformed"` or `"obfuscated"`.
    pub fallback: Option<&'static str>,
}

/// The trusted proxies and the header they set.
#[derive(Debug, Clone)]
pub struct Proxies {
    trusted: Vec<IpNet>,
    header: ForwardedHeader,
}

/// One hop of a forwarding header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hop {
    Ip(IpAddr),
    /// `unknown`, an obfuscated identifier, or an element without `for`.
    Opaque,
}

impl Proxies {
    pub fn new(trusted: Vec<IpNet>, header: ForwardedHeader) -> Self {
        Proxies { trusted, header }
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|net| net.contains(&ip))
    }

    /// The client of a request from `peer` carrying `headers`.
    pub fn resolve(&self, peer: IpAddr, headers: &HeaderMap) -> ClientAddr {
        let peer = peer.to_canonical();
        let direct = ClientAddr {
            ip: peer,
            fallback: None,
        };
        if !self.is_trusted(peer) {
            return direct;
        }
        let hops = match self.header {
            ForwardedHeader::XForwardedFor => joined(headers, "x-forwarded-for").map(|v| xff(&v)),
            ForwardedHeader::Forwarded => joined(headers, "forwarded").map(|v| forwarded(&v)),
        };
        let hops = match hops {
            None => return direct,
            Some(Ok(hops)) => hops,
            Some(Err(())) => {
                return ClientAddr {
                    ip: peer,
                    fallback: Some("malformed"),
                };
            }
        };
        for hop in hops.iter().rev() {
            match *hop {
                Hop::Ip(ip) if self.is_trusted(ip) => continue,
                Hop::Ip(ip) => {
                    return ClientAddr { ip, fallback: None };
                }
                Hop::Opaque => {
                    return ClientAddr {
                        ip: peer,
                        fallback: Some("obfuscated"),
                    };
                }
            }
        }
        match hops.first() {
            Some(Hop::Ip(ip)) => ClientAddr {
                ip: *ip,
                fallback: None,
            },
            _ => direct,
        }
    }
}

/// Every line of a header, in order, joined as one list (RFC 9110 5.3).
/// `None` when absent; `Some(Err)` when a value is not visible ASCII.
fn joined(headers: &HeaderMap, name: &str) -> Option<Result<String, ()>> {
    let mut values = headers.get_all(name).iter().peekable();
    values.peek()?;
    let mut out = String::new();
    for value in values {
        let Ok(text) = value.to_str() else {
            return Some(Err(()));
        };
        if !out.is_empty() {
            out.push(',');
        }
        out.push_str(text);
    }
    Some(Ok(out))
}

fn xff(value: &Result<String, ()>) -> Result<Vec<Hop>, ()> {
    let value = value.as_ref().map_err(|_| ())?;
    value.split(',').map(|item| node(item.trim())).collect()
}

fn forwarded(value: &Result<String, ()>) -> Result<Vec<Hop>, ()> {
    let value = value.as_ref().map_err(|_| ())?;
    let mut hops = Vec::new();
    for element in split_outside_quotes(value, ',') {
        let mut hop = Hop::Opaque;
        for pair in split_outside_quotes(&element, ';') {
            let pair = pair.trim();
            if pair.is_empty() {
                continue;
            }
            let (key, raw) = pair.split_once('=').ok_or(())?;
            if key.trim().eq_ignore_ascii_case("for") {
                hop = node(&unquote(raw.trim())?)?;
            }
        }
        hops.push(hop);
    }
    Ok(hops)
}

/// Splits on `sep` where it is not inside a quoted string.
fn split_outside_quotes(text: &str, sep: char) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let (mut quoted, mut escaped) = (false, false);
    for c in text.chars() {
        if escaped {
            escaped = false;
        } else if quoted && c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        } else if c == sep && !quoted {
            parts.push(std::mem::take(&mut current));
            continue;
        }
        current.push(c);
    }
    parts.push(current);
    parts
}

/// A token or a quoted string, without its quotes and escapes.
fn unquote(value: &str) -> Result<String, ()> {
    let Some(inner) = value.strip_prefix('"') else {
        return Ok(value.to_owned());
    };
    let inner = inner.strip_suffix('"').ok_or(())?;
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        out.push(if c == '\\' {
            chars.next().ok_or(())?
        } else {
            c
        });
    }
    Ok(out)
}

/// A node: `192.0.2.1`, `192.0.2.1:4711`, `[2001:db8::1]`,
/// `[2001:db8::1]:4711`, a bare IPv6 address, `unknown` or `_obfuscated`.
fn node(text: &str) -> Result<Hop, ()> {
    if text.eq_ignore_ascii_case("unknown") || text.starts_with('_') {
        return Ok(Hop::Opaque);
    }
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Ok(Hop::Ip(ip.to_canonical()));
    }
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(Hop::Ip(addr.ip().to_canonical()));
    }
    // Bracketed IPv6, with an optional (possibly obfuscated) port.
    if let Some(rest) = text.strip_prefix('[')
        && let Some((ip, port)) = rest.split_once(']')
        && (port.is_empty() || port.starts_with(':'))
        && let Ok(ip) = ip.parse::<IpAddr>()
    {
        return Ok(Hop::Ip(ip.to_canonical()));
    }
    // IPv4 with an obfuscated port (`192.0.2.1:_abc`).
    if let Some((ip, port)) = text.split_once(':')
        && port.starts_with('_')
        && let Ok(ip) = ip.parse::<IpAddr>()
    {
        return Ok(Hop::Ip(ip));
    }
    Err(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn proxies(trusted: &[&str], header: ForwardedHeader) -> Proxies {
        Proxies::new(trusted.iter().map(|t| t.parse().unwrap()).collect(), header)
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    const LB: &str = "10.0.0.5";

    fn xff_client(value: &str) -> ClientAddr {
        proxies(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor)
            .resolve(ip(LB), &headers(&[("x-forwarded-for", value)]))
    }

    fn fwd_client(value: &str) -> ClientAddr {
        proxies(
            &["10.0.0.0/8", "2001:db8:ffff::/48"],
            ForwardedHeader::Forwarded,
        )
        .resolve(ip(LB), &headers(&[("forwarded", value)]))
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_claims() {
        let p = proxies(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let h = headers(&[("x-forwarded-for", "203.0.113.7")]);
        let got = p.resolve(ip("198.51.100.9"), &h);
        assert_eq!(got.ip, ip("198.51.100.9"));
        assert_eq!(got.fallback, None);
        let none = proxies(&[], ForwardedHeader::XForwardedFor);
        assert_eq!(none.resolve(ip(LB), &h).ip, ip(LB));
    }

    #[test]
    fn a_trusted_peer_without_a_header_is_the_client() {
        let p = proxies(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let got = p.resolve(ip(LB), &HeaderMap::new());
        assert_eq!(
            got,
            ClientAddr {
                ip: ip(LB),
                fallback: None
            }
        );
    }

    #[test]
    fn x_forwarded_for_is_read_from_the_right_skipping_trusted_hops() {
        assert_eq!(xff_client("203.0.113.7").ip, ip("203.0.113.7"));
        assert_eq!(xff_client("203.0.113.7, 10.1.2.3").ip, ip("203.0.113.7"));
        assert_eq!(xff_client("2001:db8::7").ip, ip("2001:db8::7"));
        assert_eq!(xff_client("[2001:db8::7]:443").ip, ip("2001:db8::7"));
        assert_eq!(xff_client("203.0.113.7:5555").ip, ip("203.0.113.7"));
        assert_eq!(xff_client("::ffff:203.0.113.7").ip, ip("203.0.113.7"));
        // Every hop trusted: the leftmost is the client.
        assert_eq!(xff_client("10.9.9.9, 10.1.1.1").ip, ip("10.9.9.9"));
    }

    #[test]
    fn forged_leftmost_entries_are_ignored() {
        // The client sent "X-Forwarded-For: 203.0.113.7" itself; the proxy
        // appended the address it saw.
        assert_eq!(
            xff_client("203.0.113.7, 198.51.100.1").ip,
            ip("198.51.100.1")
        );
        assert_eq!(
            fwd_client("for=203.0.113.7, for=198.51.100.1;proto=https").ip,
            ip("198.51.100.1")
        );
    }

    #[test]
    fn several_header_lines_read_as_one_list() {
        let p = proxies(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let h = headers(&[
            ("x-forwarded-for", "203.0.113.7"),
            ("x-forwarded-for", "198.51.100.1, 10.0.0.2"),
        ]);
        assert_eq!(p.resolve(ip(LB), &h).ip, ip("198.51.100.1"));
    }

    #[test]
    fn forwarded_handles_ports_quotes_case_and_ipv6() {
        assert_eq!(
            fwd_client("for=192.0.2.60;proto=http;by=203.0.113.43").ip,
            ip("192.0.2.60")
        );
        assert_eq!(fwd_client("For=\"192.0.2.43:47011\"").ip, ip("192.0.2.43"));
        assert_eq!(
            fwd_client("for=\"[2001:db8:cafe::17]:4711\"").ip,
            ip("2001:db8:cafe::17")
        );
        assert_eq!(
            fwd_client("for=\"[2001:db8:cafe::17]\"").ip,
            ip("2001:db8:cafe::17")
        );
        assert_eq!(
            fwd_client("for=\"[2001:db8:cafe::17]:4711\", for=\"[2001:db8:ffff::1]\"").ip,
            ip("2001:db8:cafe::17")
        );
        assert_eq!(fwd_client("for=192.0.2.43:_hidden").ip, ip("192.0.2.43"));
        // A quoted comma does not split elements.
        assert_eq!(
            fwd_client("for=198.51.100.1;ext=\"a,b\", for=10.0.0.3").ip,
            ip("198.51.100.1")
        );
    }

    #[test]
    fn an_obfuscated_client_hop_falls_back_to_the_peer() {
        for value in [
            "for=_hidden",
            "for=unknown",
            "for=_x, for=10.0.0.2",
            "proto=https",
        ] {
            let got = fwd_client(value);
            assert_eq!(got.ip, ip(LB), "{value}");
            assert_eq!(got.fallback, Some("obfuscated"), "{value}");
        }
        // Obfuscated hops left of the client do not matter.
        assert_eq!(fwd_client("for=_x, for=198.51.100.1").fallback, None);
    }

    #[test]
    fn malformed_headers_fall_back_to_the_peer() {
        for value in ["not-an-ip", "203.0.113.7,,10.0.0.1", "", "203.0.113.300"] {
            let got = xff_client(value);
            assert_eq!(
                got,
                ClientAddr {
                    ip: ip(LB),
                    fallback: Some("malformed")
                },
                "{value:?}"
            );
        }
        for value in ["for=\"192.0.2.1", "for", "for=[2001:db8::1", "for=\"\\"] {
            assert_eq!(fwd_client(value).fallback, Some("malformed"), "{value:?}");
        }
    }

    #[test]
    fn only_the_configured_header_is_believed() {
        let p = proxies(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let h = headers(&[("forwarded", "for=203.0.113.7")]);
        assert_eq!(p.resolve(ip(LB), &h).ip, ip(LB));
    }

    #[test]
    fn a_mapped_ipv4_peer_matches_ipv4_proxies() {
        let p = proxies(&["127.0.0.1/32"], ForwardedHeader::XForwardedFor);
        let h = headers(&[("x-forwarded-for", "203.0.113.7")]);
        assert_eq!(p.resolve(ip("::ffff:127.0.0.1"), &h).ip, ip("203.0.113.7"));
    }
}
