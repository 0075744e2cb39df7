//! Who the client is: the TCP peer, or, when the peer is a trusted proxy,
//! the address its forwarding header names.
//!
//! Only a peer inside `server.trusted_proxies` is believed, and only the
//! one header `server.forwarded_header` names (`X-Forwarded-For` by
//! default, or RFC 7239 `Forwarded`): a proxy that manages one header
//! passes the other through from the client untouched, so reading both
//! would let a client choose its own address. Each proxy appends the
//! address it received from, so the header is walked from the right,
//! skipping trusted hops; the first untrusted hop is the client. Entries to
//! its left were written by the client itself and are never parsed, so junk
//! there changes nothing. When every hop is trusted, the leftmost is the
//! client; a trusted peer that sends no header at all is the client itself.
//!
//! A hop that cannot be read before the client is found (junk, or an
//! obfuscated `for=_hidden` / `for=unknown`) was written by a trusted proxy
//! and leaves the client unknown: the request is refused ([`Unreadable`]).
//! Falling back to the peer instead would make every such request come from
//! the proxy, an address an allowlist may well admit.

use std::net::{IpAddr, SocketAddr};

use axum::http::HeaderMap;
use ipnet::IpNet;

use crate::config::ForwardedHeader;

/// Why a trusted proxy's header names no client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreadable {
    /// A hop that is not an address, or a header that is not text.
    Malformed,
    /// The hop is `unknown`, an obfuscated identifier, or an element
    /// without `for`.
    Obfuscated,
}

impl Unreadable {
    /// The `{"error": ...}` of the 400 and the metrics label.
    pub fn reason(self) -> &'static str {
        match self {
            Unreadable::Malformed => "malformed_forwarding_header",
            Unreadable::Obfuscated => "unknown_client",
        }
    }
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
    pub fn resolve(&self, peer: IpAddr, headers: &HeaderMap) -> Result<IpAddr, Unreadable> {
        let peer = peer.to_canonical();
        if !self.is_trusted(peer) {
            return Ok(peer);
        }
        let items = items(headers, self.header);
        if items.is_empty() {
            return Ok(peer);
        }
        let mut leftmost = None;
        for item in items.iter().rev() {
            let Ok(text) = item else {
                return Err(Unreadable::Malformed);
            };
            let hop = match self.header {
                ForwardedHeader::XForwardedFor => node(text.trim()),
                ForwardedHeader::Forwarded => forwarded_element(text),
            };
            match hop.map_err(|()| Unreadable::Malformed)? {
                Hop::Ip(ip) if self.is_trusted(ip) => leftmost = Some(ip),
                Hop::Ip(ip) => return Ok(ip),
                Hop::Opaque => return Err(Unreadable::Obfuscated),
            }
        }
        Ok(leftmost.unwrap_or(peer))
    }
}

/// The elements of every line of the header, in order (several lines read
/// as one list, RFC 9110 5.3), unparsed. A line is split on its own, so a
/// quote a client leaves open cannot swallow the line a proxy added; and a
/// line that ends inside a quoted string makes its last element unreadable,
/// since that element is where a proxy that appends to the client's line
/// (`$http_forwarded, for=$remote_addr`) put its own, now swallowed. A line
/// that is not visible ASCII is one unreadable element. An unreadable
/// element only matters if the walk reaches it.
fn items(headers: &HeaderMap, header: ForwardedHeader) -> Vec<Result<String, ()>> {
    let name = match header {
        ForwardedHeader::XForwardedFor => "x-forwarded-for",
        ForwardedHeader::Forwarded => "forwarded",
    };
    let mut out = Vec::new();
    for value in headers.get_all(name) {
        let Ok(line) = value.to_str() else {
            out.push(Err(()));
            continue;
        };
        match header {
            ForwardedHeader::XForwardedFor => out.extend(line.split(',').map(|i| Ok(i.to_owned()))),
            ForwardedHeader::Forwarded => {
                let (elements, closed) = split_outside_quotes(line, ',');
                let last = elements.len() - 1;
                out.extend(
                    elements
                        .into_iter()
                        .enumerate()
                        .map(|(i, e)| if i == last && !closed { Err(()) } else { Ok(e) }),
                );
            }
        }
    }
    out
}

/// One `Forwarded` element: its `for` node, or [`Hop::Opaque`] without one.
/// Every pair's value must be a token or a whole quoted string, whatever
/// its key: a value left open is where another element was swallowed.
fn forwarded_element(element: &str) -> Result<Hop, ()> {
    let mut hop = Hop::Opaque;
    let (pairs, closed) = split_outside_quotes(element, ';');
    if !closed {
        return Err(());
    }
    for pair in pairs {
        let pair = pair.trim();
        if pair.is_empty() {
            continue;
        }
        let (key, raw) = pair.split_once('=').ok_or(())?;
        let value = unquote(raw.trim())?;
        if key.trim().eq_ignore_ascii_case("for") {
            hop = node(&value)?;
        }
    }
    Ok(hop)
}

/// Splits on `sep` where it is not inside a quoted string; `false` when
/// the text ends inside one.
fn split_outside_quotes(text: &str, sep: char) -> (Vec<String>, bool) {
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
    (parts, !quoted)
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

    fn xff_client(value: &str) -> Result<IpAddr, Unreadable> {
        proxies(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor)
            .resolve(ip(LB), &headers(&[("x-forwarded-for", value)]))
    }

    fn fwd_client(value: &str) -> Result<IpAddr, Unreadable> {
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
        assert_eq!(p.resolve(ip("198.51.100.9"), &h), Ok(ip("198.51.100.9")));
        let junk = headers(&[("x-forwarded-for", "junk")]);
        assert_eq!(p.resolve(ip("198.51.100.9"), &junk), Ok(ip("198.51.100.9")));
        let none = proxies(&[], ForwardedHeader::XForwardedFor);
        assert_eq!(none.resolve(ip(LB), &h), Ok(ip(LB)));
    }

    #[test]
    fn a_trusted_peer_without_a_header_is_the_client() {
        let p = proxies(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        assert_eq!(p.resolve(ip(LB), &HeaderMap::new()), Ok(ip(LB)));
    }

    #[test]
    fn x_forwarded_for_is_read_from_the_right_skipping_trusted_hops() {
        assert_eq!(xff_client("203.0.113.7"), Ok(ip("203.0.113.7")));
        assert_eq!(xff_client("203.0.113.7, 10.1.2.3"), Ok(ip("203.0.113.7")));
        assert_eq!(xff_client("2001:db8::7"), Ok(ip("2001:db8::7")));
        assert_eq!(xff_client("[2001:db8::7]:443"), Ok(ip("2001:db8::7")));
        assert_eq!(xff_client("203.0.113.7:5555"), Ok(ip("203.0.113.7")));
        assert_eq!(xff_client("::ffff:203.0.113.7"), Ok(ip("203.0.113.7")));
        // Every hop trusted: the leftmost is the client.
        assert_eq!(xff_client("10.9.9.9, 10.1.1.1"), Ok(ip("10.9.9.9")));
    }

    #[test]
    fn forged_leftmost_entries_are_ignored() {
        // The client sent "X-Forwarded-For: 203.0.113.7" itself; the proxy
        // appended the address it saw.
        assert_eq!(
            xff_client("203.0.113.7, 198.51.100.1"),
            Ok(ip("198.51.100.1"))
        );
        assert_eq!(
            fwd_client("for=203.0.113.7, for=198.51.100.1;proto=https"),
            Ok(ip("198.51.100.1"))
        );
    }

    #[test]
    fn junk_left_of_the_first_untrusted_hop_is_never_read() {
        for value in [
            "junk, 203.0.113.9",
            "junk, 203.0.113.9, 10.0.0.2",
            "203.0.113.300,,not an address, 203.0.113.9",
            ", 203.0.113.9",
        ] {
            assert_eq!(xff_client(value), Ok(ip("203.0.113.9")), "{value:?}");
        }
        for value in [
            "for=\"192.0.2.1\"x, for=203.0.113.9",
            "for, for=_hidden, for=unknown, for=203.0.113.9;proto=https",
            "for=[2001:db8::1, for=\"[2001:db8:cafe::17]\"",
        ] {
            assert!(fwd_client(value).is_ok(), "{value:?}");
        }
        // A line a client sent with a quote left open does not swallow
        // the line the proxy added.
        let p = proxies(&["10.0.0.0/8"], ForwardedHeader::Forwarded);
        let h = headers(&[("forwarded", "for=\"x"), ("forwarded", "for=203.0.113.9")]);
        assert_eq!(p.resolve(ip(LB), &h), Ok(ip("203.0.113.9")));
        // Nor does a line that is not text.
        let p = proxies(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let mut h = HeaderMap::new();
        h.append(
            "x-forwarded-for",
            HeaderValue::from_bytes(b"\xff\xfe").unwrap(),
        );
        h.append("x-forwarded-for", HeaderValue::from_static("203.0.113.9"));
        assert_eq!(p.resolve(ip(LB), &h), Ok(ip("203.0.113.9")));
        h.append("x-forwarded-for", HeaderValue::from_bytes(b"\xff").unwrap());
        assert_eq!(p.resolve(ip(LB), &h), Err(Unreadable::Malformed));
    }

    #[test]
    fn several_header_lines_read_as_one_list() {
        let p = proxies(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let h = headers(&[
            ("x-forwarded-for", "203.0.113.7"),
            ("x-forwarded-for", "198.51.100.1, 10.0.0.2"),
        ]);
        assert_eq!(p.resolve(ip(LB), &h), Ok(ip("198.51.100.1")));
    }

    #[test]
    fn forwarded_handles_ports_quotes_case_and_ipv6() {
        assert_eq!(
            fwd_client("for=192.0.2.60;proto=http;by=203.0.113.43"),
            Ok(ip("192.0.2.60"))
        );
        assert_eq!(fwd_client("For=\"192.0.2.43:47011\""), Ok(ip("192.0.2.43")));
        assert_eq!(
            fwd_client("for=\"[2001:db8:cafe::17]:4711\""),
            Ok(ip("2001:db8:cafe::17"))
        );
        assert_eq!(
            fwd_client("for=\"[2001:db8:cafe::17]\""),
            Ok(ip("2001:db8:cafe::17"))
        );
        assert_eq!(
            fwd_client("for=\"[2001:db8:cafe::17]:4711\", for=\"[2001:db8:ffff::1]\""),
            Ok(ip("2001:db8:cafe::17"))
        );
        assert_eq!(fwd_client("for=192.0.2.43:_hidden"), Ok(ip("192.0.2.43")));
        // A quoted comma does not split elements.
        assert_eq!(
            fwd_client("for=198.51.100.1;ext=\"a,b\", for=10.0.0.3"),
            Ok(ip("198.51.100.1"))
        );
    }

    #[test]
    fn an_obfuscated_client_hop_is_unknown_not_the_peer() {
        for value in [
            "for=_hidden",
            "for=unknown",
            "for=_x, for=10.0.0.2",
            "proto=https",
        ] {
            assert_eq!(fwd_client(value), Err(Unreadable::Obfuscated), "{value}");
        }
        assert_eq!(xff_client("unknown"), Err(Unreadable::Obfuscated));
        // Obfuscated hops left of the client do not matter.
        assert_eq!(
            fwd_client("for=_x, for=198.51.100.1"),
            Ok(ip("198.51.100.1"))
        );
    }

    #[test]
    fn a_header_unreadable_before_the_client_is_malformed_not_the_peer() {
        for value in [
            "not-an-ip",
            "203.0.113.7,,10.0.0.1",
            "",
            "203.0.113.300",
            "203.0.113.9, junk",
            "203.0.113.9,",
            "junk, 10.0.0.1",
        ] {
            assert_eq!(xff_client(value), Err(Unreadable::Malformed), "{value:?}");
        }
        for value in [
            "for=\"192.0.2.1",
            "for",
            "for=[2001:db8::1",
            "for=\"\\",
            "for=203.0.113.9, for=\"10.0.0.1",
            // A quote the client left open under another key swallows the
            // element a proxy appended to the client's own line.
            "for=9.9.9.9;x=\", for=203.0.113.9",
        ] {
            assert_eq!(fwd_client(value), Err(Unreadable::Malformed), "{value:?}");
        }
    }

    #[test]
    fn only_the_configured_header_is_believed() {
        let p = proxies(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let h = headers(&[("forwarded", "for=203.0.113.7")]);
        assert_eq!(p.resolve(ip(LB), &h), Ok(ip(LB)));
    }

    #[test]
    fn a_mapped_ipv4_peer_matches_ipv4_proxies() {
        let p = proxies(&["127.0.0.1/32"], ForwardedHeader::XForwardedFor);
        let h = headers(&[("x-forwarded-for", "203.0.113.7")]);
        assert_eq!(p.resolve(ip("::ffff:127.0.0.1"), &h), Ok(ip("203.0.113.7")));
    }
}
