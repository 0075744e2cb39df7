//! Twilio: `X-Twilio-Signature: <base64>` of HMAC-SHA1 (the auth token)
//! over the URL Twilio called followed by the POST parameters.
//!
//! Spec: <https://www.twilio.com/docs/usage/webhooks/webhooks-security>,
//! mirrored from twilio-node 6.3.1 `lib/webhooks/webhooks.js`
//! (`validateRequest`, `validateRequestWithBody`, `getSignatureAlgorithm`):
//!
//! * **Form bodies** (the usual callback): the signed string is the URL,
//!   then every parameter sorted by name as `name + value`, no separators;
//!   a name sent several times contributes each distinct value, sorted.
//! * **JSON bodies**: Twilio adds `bodySHA256=<hex SHA-256 of the body>` to
//!   the URL's query and signs the URL alone; the body must hash to it.
//! * **Webhooks Rules**: with `X-Twilio-Webhooks-Signature-Settings:
//!   key=..,algorithm=HMAC_SHA256` the key is the rule's SharedKey secret
//!   and the MAC HMAC-SHA256; any other algorithm is refused. List the
//!   SharedKey secret in `secrets` next to the auth token.
//!
//! The URL: hookbox cannot see the one Twilio called behind a proxy, so it
//! is the source's `public_url`, followed by `?` and the request's query as
//! received. Like the SDK, the URL is tried as is and as WHATWG-normalised,
//! each without and with an explicit port, and the normalised ones also
//! with the query re-encoded the way Node's legacy `querystring` does
//! (Twilio's back end signed that form of some query values).
//!
//! Nothing is timestamped: no tolerance window. The dedupe key is
//! `sig:` + the hex SHA-256 of the signature's bytes ([`signature_id`]):
//! the signature is the one part of a request bound to all that Twilio
//! signed (the URL with its query, the parameters, the body's hash). The
//! `I-Twilio-Idempotency-Token` header is not signed: keyed on it, a
//! captured request re-posted with a new token, at any time, was a new
//! event. Nor is the form body's spelling (parameter order, `%41` for
//! `A`), which a key on the body's bytes let an attacker vary. A retry of
//! Twilio's is the same request, so the same signature: a duplicate. The
//! token is kept with the event's headers. The event type is the first of
//! `EventType`, `MessageStatus`, `SmsStatus`, `CallStatus`,
//! `RecordingStatus` present, or none.

use std::cmp::Ordering;

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::config::{
    DEFAULT_TOLERANCE, KindFacts, PLACEHOLDER_SECRET, Secret, SourceConfig, any_secret,
};

use super::payload::{Identified, IdentifyError, Identity, Inbound};
use super::provider::{Provider, owned};
use super::source::public_url;
use super::verify::{
    VerifyError, ct_eq, decode_base64, header, header_str, hmac_sha256, utf8_keys,
};

pub struct Twilio {
    keys: Vec<Vec<u8>>,
    public_url: String,
}

/// Provider headers stored with the event (never the signature).
pub const KEEP_HEADERS: &[&str] = &[
    "i-twilio-idempotency-token",
    "x-home-region",
    "x-twilio-webhooks-signature-settings",
    "user-agent",
];

/// Fields naming what happened, most specific first.
const EVENT_FIELDS: &[&str] = &[
    "EventType",
    "MessageStatus",
    "SmsStatus",
    "CallStatus",
    "RecordingStatus",
];

#[derive(Clone, Copy)]
enum Algorithm {
    Sha1,
    Sha256,
}

impl Twilio {
    /// Each key is an auth token (or a Webhooks Rule's SharedKey secret)
    /// as UTF-8 bytes.
    pub fn new(secrets: &[Secret], public_url: &str) -> Self {
        Twilio {
            keys: utf8_keys(secrets),
            public_url: public_url.to_owned(),
        }
    }

    /// The URL Twilio called: `public_url`, then the request's query.
    fn url(&self, req: &Inbound) -> String {
        match req.query {
            Some(query) => format!("{}?{query}", self.public_url),
            None => self.public_url.clone(),
        }
    }

    pub fn verify(&self, req: &Inbound) -> Result<(), VerifyError> {
        let value =
            header(req.headers, "x-twilio-signature").ok_or(VerifyError::MissingSignature)?;
        let algorithm = algorithm(header_str(
            req.headers,
            "x-twilio-webhooks-signature-settings",
        ))?;
        let sig = decode_base64(value).ok_or(VerifyError::MalformedSignature)?;
        let url = self.url(req);
        let params = if url.contains("bodySHA256") {
            // Only the URL is signed; the body is bound to it by its hash.
            let expected = hex::encode(Sha256::digest(req.body));
            let sent = url::Url::parse(&url).ok().and_then(|u| {
                u.query_pairs()
                    .find(|(k, _)| k == "bodySHA256")
                    .map(|(_, v)| v.into_owned())
            });
            if !sent.is_some_and(|sent| ct_eq(sent.as_bytes(), expected.as_bytes())) {
                return Err(VerifyError::InvalidSignature);
            }
            String::new()
        } else {
            signed_params(req.body).ok_or(VerifyError::InvalidSignature)?
        };
        let mut matched = false;
        for candidate in candidate_urls(&url) {
            for key in &self.keys {
                let mac = mac(algorithm, key, &[candidate.as_bytes(), params.as_bytes()]);
                matched |= ct_eq(&mac, &sig);
            }
        }
        if matched {
            Ok(())
        } else {
            Err(VerifyError::InvalidSignature)
        }
    }

    pub fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        let delivery_id = signature_id(req)?;
        let event_type = match req.json() {
            Some(json) => EVENT_FIELDS
                .iter()
                .chain(&["type"])
                .find_map(|f| json.get(*f).and_then(Value::as_str).map(str::to_owned)),
            None => {
                let pairs = form_pairs(req.body, Decode::Strict).unwrap_or_default();
                EVENT_FIELDS.iter().find_map(|field| {
                    pairs
                        .iter()
                        .find(|(k, _)| k == field)
                        .map(|(_, v)| v.clone())
                })
            }
        };
        Ok(Identified::Event(Identity {
            delivery_id,
            event_type: event_type.filter(|t| !t.is_empty()),
        }))
    }
}

/// The dedupe key of a verified request: `sig:` + the hex SHA-256 of its
/// signature, decoded (so no other spelling of the same bytes is another
/// key). Two requests share it only if they are the same signed request.
fn signature_id(req: &Inbound) -> Result<String, IdentifyError> {
    let sig = header(req.headers, "x-twilio-signature")
        .and_then(decode_base64)
        .ok_or(IdentifyError::MissingDeliveryId)?;
    Ok(format!("sig:{}", hex::encode(Sha256::digest(&sig))))
}

/// The algorithm `X-Twilio-Webhooks-Signature-Settings` names: HMAC-SHA1
/// without the header or without an `algorithm=` in it, as the SDK reads it.
fn algorithm(settings: Option<&str>) -> Result<Algorithm, VerifyError> {
    let named = settings.unwrap_or_default().split(',').find_map(|part| {
        let (key, value) = part.split_once('=')?;
        (key.trim() == "algorithm" && !value.trim().is_empty()).then(|| value.trim())
    });
    match named.map(str::to_ascii_uppercase).as_deref() {
        None | Some("HMAC_SHA1") => Ok(Algorithm::Sha1),
        Some("HMAC_SHA256") => Ok(Algorithm::Sha256),
        Some(_) => Err(VerifyError::MalformedSignature),
    }
}

fn mac(algorithm: Algorithm, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    use hmac::{Hmac, KeyInit, Mac};
    match algorithm {
        Algorithm::Sha256 => hmac_sha256(key, parts).to_vec(),
        Algorithm::Sha1 => {
            let mut mac =
                Hmac::<sha1::Sha1>::new_from_slice(key).expect("HMAC accepts keys of any length");
            for part in parts {
                mac.update(part);
            }
            mac.finalize().into_bytes().to_vec()
        }
    }
}

/// The form parameters as Twilio signs them: sorted by name (JavaScript's
/// order: UTF-16 code units), each distinct value of a name sorted, each
/// as `name + value`. `None` when the body is not a well-formed form
/// (a bad `%` escape, or text that is not UTF-8): Twilio never sends one.
fn signed_params(body: &[u8]) -> Option<String> {
    let mut pairs = form_pairs(body, Decode::Strict)?;
    pairs.sort_by(|a, b| js_cmp(&a.0, &b.0).then_with(|| js_cmp(&a.1, &b.1)));
    pairs.dedup();
    Some(pairs.into_iter().map(|(k, v)| k + &v).collect())
}

/// JavaScript's default string order.
fn js_cmp(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

#[derive(Clone, Copy, PartialEq)]
enum Decode {
    /// A bad escape or non-UTF-8 text refuses the whole form.
    Strict,
    /// As Node's `querystring.unescape`: a bad escape is kept as text.
    Lenient,
}

/// `a=1&b=x+y` as decoded pairs; empty pieces are skipped, a piece without
/// `=` is a name with an empty value.
fn form_pairs(body: &[u8], decode: Decode) -> Option<Vec<(String, String)>> {
    body.split(|&b| b == b'&')
        .filter(|piece| !piece.is_empty())
        .map(|piece| {
            let (k, v) = match piece.iter().position(|&b| b == b'=') {
                Some(eq) => (&piece[..eq], &piece[eq + 1..]),
                None => (piece, &b""[..]),
            };
            Some((unescape(k, decode)?, unescape(v, decode)?))
        })
        .collect()
}

/// `+` as a space and `%XX` as a byte, then UTF-8.
fn unescape(raw: &[u8], decode: Decode) -> Option<String> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        match raw[i] {
            b'+' => out.push(b' '),
            b'%' => match raw.get(i + 1..i + 3).and_then(|h| hex::decode(h).ok()) {
                Some(byte) => {
                    out.extend_from_slice(&byte);
                    i += 2;
                }
                None if decode == Decode::Lenient => out.push(b'%'),
                None => return None,
            },
            b => out.push(b),
        }
        i += 1;
    }
    match decode {
        Decode::Strict => String::from_utf8(out).ok(),
        Decode::Lenient => Some(String::from_utf8_lossy(&out).into_owned()),
    }
}

/// The URLs twilio-node's `validateRequest` tries; all are tried, so order
/// does not matter.
fn candidate_urls(url: &str) -> Vec<String> {
    let mut out = vec![remove_port(url), add_port(url)];
    if let Ok(parsed) = url::Url::parse(url) {
        let normalized = parsed.to_string();
        let without = remove_port(&normalized);
        let with = add_port(&normalized);
        out.push(legacy_querystring(&without));
        out.push(legacy_querystring(&with));
        out.push(without);
        out.push(with);
    }
    out.dedup();
    out
}

/// `scheme://`, user info, host and port of a URL, split as the SDK's
/// `splitUrl` does, without normalising anything.
struct Split<'a> {
    scheme: &'a str,
    user_info: &'a str,
    host: &'a str,
    port: &'a str,
    rest: &'a str,
}

fn split_url(url: &str) -> Option<Split<'_>> {
    let scheme_end = url.find("://")?;
    let scheme = &url[..scheme_end];
    let valid_scheme = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-'));
    if !valid_scheme {
        return None;
    }
    let after = scheme_end + 3;
    let authority_end = url[after..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| after + i);
    let authority = &url[after..authority_end];
    let user_end = authority.rfind('@').map_or(0, |i| i + 1);
    let host_port = &authority[user_end..];
    let bracket = host_port.rfind(']').map_or(0, |i| i + 1);
    let port_start = host_port[bracket..].find(':').map(|i| bracket + i);
    let (host, port) = match port_start {
        Some(p) => (&host_port[..p], &host_port[p..]),
        None => (host_port, ""),
    };
    Some(Split {
        scheme: &url[..after],
        user_info: &authority[..user_end],
        host,
        port,
        rest: &url[authority_end..],
    })
}

fn add_port(url: &str) -> String {
    match split_url(url) {
        Some(s) if s.port.is_empty() => {
            let port = if s.scheme.eq_ignore_ascii_case("https://") {
                ":443"
            } else {
                ":80"
            };
            format!("{}{}{}{port}{}", s.scheme, s.user_info, s.host, s.rest)
        }
        _ => url.to_owned(),
    }
}

fn remove_port(url: &str) -> String {
    match split_url(url) {
        Some(s) => format!("{}{}{}{}", s.scheme, s.user_info, s.host, s.rest),
        None => url.to_owned(),
    }
}

/// The URL with its query parsed and re-encoded by Node's legacy
/// `querystring` (`parse` then `stringify`): repeated names grouped at
/// their first place, integer-like names first in numeric order (a
/// JavaScript object's key order), and `escape`'s character set.
fn legacy_querystring(url: &str) -> String {
    let Some(start) = url.find('?').filter(|&q| q + 1 < url.len()) else {
        return url.to_owned();
    };
    let pairs = form_pairs(&url.as_bytes()[start + 1..], Decode::Lenient).unwrap_or_default();
    let mut keys: Vec<(String, Vec<String>)> = Vec::new();
    for (k, v) in pairs {
        match keys.iter_mut().find(|(name, _)| *name == k) {
            Some((_, values)) => values.push(v),
            None => keys.push((k, vec![v])),
        }
    }
    // Stable: integer-like keys first, by value; the others keep their order.
    keys.sort_by_key(|(k, _)| array_index(k).map_or((1, 0), |i| (0, i)));
    let query: Vec<String> = keys
        .iter()
        .flat_map(|(k, values)| {
            values
                .iter()
                .map(move |v| format!("{}={}", escape(k), escape(v)))
        })
        .collect();
    format!("{}?{}", &url[..start], query.join("&"))
}

/// The value of a JavaScript array-index property name (`"0"`, `"42"`,
/// not `"042"`), which objects list first.
fn array_index(key: &str) -> Option<u64> {
    let canonical = key == "0" || (!key.starts_with('0') && !key.is_empty());
    let value: u64 = key
        .parse()
        .ok()
        .filter(|_| canonical && key.bytes().all(|b| b.is_ascii_digit()))?;
    (value < u64::from(u32::MAX)).then_some(value)
}

/// Node's `querystring.escape`: all but `A-Z a-z 0-9 - . _ ~ ! ' ( ) *`
/// percent-encoded as UTF-8 with uppercase hex.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~!'()*".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

const FACTS: KindFacts = KindFacts {
    name: "twilio",
    default_tolerance: DEFAULT_TOLERANCE,
    signs_url: true,
    check_secret: any_secret,
    placeholder_secret: PLACEHOLDER_SECRET,
};

impl Provider for Twilio {
    fn facts() -> &'static KindFacts {
        &FACTS
    }

    fn from_config(cfg: &SourceConfig) -> Self {
        Twilio::new(&cfg.secrets, public_url(cfg))
    }

    fn verify(&self, req: &Inbound, _now_ms: i64) -> Result<(), VerifyError> {
        Twilio::verify(self, req)
    }

    fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        Twilio::identify(self, req)
    }

    fn keep_headers(&self) -> Vec<String> {
        owned(KEEP_HEADERS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};

    // Twilio's documented example (webhooks-security page and twilio-node's
    // tests): token 12345, this URL and these parameters.
    const TOKEN: &str = "12345";
    const DOC_URL: &str = "https://mycompany.com/myapp.php";
    const DOC_QUERY: &str = "foo=1&bar=2";
    const DOC_BODY: &[u8] = b"CallSid=CA1234567890ABCDE&Caller=%2B12349013030&Digits=1234&From=%2B12349013030&To=%2B18005551212";
    const DOC_SIG: &str = "0/KCTR6DLpKmkAf8muzZqo1nDgQ=";

    fn twilio(secrets: &[&str], url: &str) -> Twilio {
        let secrets: Vec<Secret> = secrets.iter().map(|s| Secret::new(*s)).collect();
        Twilio::new(&secrets, url)
    }

    fn check(url: &str, query: Option<&str>, sig: &str, body: &[u8]) -> Result<(), VerifyError> {
        let mut h = HeaderMap::new();
        h.insert("x-twilio-signature", HeaderValue::from_str(sig).unwrap());
        twilio(&[TOKEN], url).verify(&Inbound::new(&h, body).with_query(query))
    }

    #[test]
    fn twilios_documented_example_verifies() {
        assert_eq!(check(DOC_URL, Some(DOC_QUERY), DOC_SIG, DOC_BODY), Ok(()));
    }

    #[test]
    fn parameter_order_in_the_body_does_not_matter_but_every_byte_of_them_does() {
        let reordered = b"To=%2B18005551212&Digits=1234&CallSid=CA1234567890ABCDE&Caller=%2B12349013030&From=%2B12349013030";
        assert_eq!(check(DOC_URL, Some(DOC_QUERY), DOC_SIG, reordered), Ok(()));
        let invalid = Err(VerifyError::InvalidSignature);
        let changed = b"CallSid=CA1234567890ABCDE&Caller=%2B12349013030&Digits=1235&From=%2B12349013030&To=%2B18005551212";
        assert_eq!(check(DOC_URL, Some(DOC_QUERY), DOC_SIG, changed), invalid);
        let extra = [DOC_BODY, b"&X=1"].concat();
        assert_eq!(check(DOC_URL, Some(DOC_QUERY), DOC_SIG, &extra), invalid);
        assert_eq!(
            check(DOC_URL, Some("foo=1&bar=3"), DOC_SIG, DOC_BODY),
            invalid
        );
        assert_eq!(check(DOC_URL, None, DOC_SIG, DOC_BODY), invalid);
        let http = "http://mycompany.com/myapp.php";
        assert_eq!(check(http, Some(DOC_QUERY), DOC_SIG, DOC_BODY), invalid);
    }

    #[test]
    fn the_url_is_tried_with_and_without_its_default_port() {
        let with_port = "https://mycompany.com:443/myapp.php";
        assert_eq!(check(with_port, Some(DOC_QUERY), DOC_SIG, DOC_BODY), Ok(()));
    }

    #[test]
    fn a_malformed_form_or_signature_is_refused() {
        let bad_escape = b"CallSid=CA%zz";
        assert_eq!(
            check(DOC_URL, Some(DOC_QUERY), DOC_SIG, bad_escape),
            Err(VerifyError::InvalidSignature)
        );
        assert_eq!(
            check(
                DOC_URL,
                Some(DOC_QUERY),
                DOC_SIG.trim_end_matches('='),
                DOC_BODY
            ),
            Err(VerifyError::MalformedSignature)
        );
        let none = HeaderMap::new();
        let missing = twilio(&[TOKEN], DOC_URL).verify(&Inbound::new(&none, DOC_BODY));
        assert_eq!(missing, Err(VerifyError::MissingSignature));
    }

    #[test]
    fn the_settings_header_chooses_the_algorithm() {
        assert!(matches!(algorithm(None), Ok(Algorithm::Sha1)));
        assert!(matches!(algorithm(Some("key=k1")), Ok(Algorithm::Sha1)));
        let sha256 = algorithm(Some("key=webhooks_sharedkey_1, algorithm=hmac_sha256"));
        assert!(matches!(sha256, Ok(Algorithm::Sha256)));
        let other = algorithm(Some("algorithm=HMAC_SHA512"));
        assert!(matches!(other, Err(VerifyError::MalformedSignature)));
    }

    #[test]
    fn params_are_sorted_by_name_then_value_and_repeats_dropped() {
        let signed = signed_params(b"b=2&a=z&a=y&a=z&c").unwrap();
        assert_eq!(signed, "ayazb2c");
        assert_eq!(signed_params(b"a=x+y%21").unwrap(), "ax y!");
        assert_eq!(signed_params(b"a=%FF"), None);
    }

    #[test]
    fn the_sdks_url_variants_are_reproduced() {
        assert_eq!(
            add_port("https://a.example/x?y=1"),
            "https://a.example:443/x?y=1"
        );
        assert_eq!(add_port("http://a.example/x"), "http://a.example:80/x");
        assert_eq!(
            add_port("https://a.example:8443/x"),
            "https://a.example:8443/x"
        );
        assert_eq!(
            remove_port("https://u:p@[::1]:8443/x"),
            "https://u:p@[::1]/x"
        );
        assert_eq!(
            legacy_querystring("https://a.example/x?b=it%27s&2=x&a=1&b=two+words&1=y"),
            "https://a.example/x?1=y&2=x&b=it's&b=two%20words&a=1"
        );
        let candidates = candidate_urls("https://A.example/x?q='");
        assert!(candidates.contains(&"https://A.example/x?q='".to_owned()));
        assert!(candidates.contains(&"https://a.example/x?q=%27".to_owned()));
        assert!(candidates.contains(&"https://a.example:443/x?q='".to_owned()));
    }

    fn identify(
        headers: &[(&'static str, &str)],
        body: &[u8],
    ) -> Result<Identified, IdentifyError> {
        let mut h = HeaderMap::new();
        for (name, value) in headers {
            h.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        twilio(&[TOKEN], DOC_URL).identify(&Inbound::new(&h, body))
    }

    #[test]
    fn identity_is_the_signature_whatever_the_unsigned_token_says() {
        let signed = [("x-twilio-signature", DOC_SIG)];
        let expected = format!(
            "sig:{}",
            hex::encode(Sha256::digest(decode_base64(DOC_SIG.as_bytes()).unwrap()))
        );
        let Ok(Identified::Event(id)) = identify(&signed, DOC_BODY) else {
            panic!("an event");
        };
        assert_eq!(id.delivery_id, expected);
        assert_eq!(id.event_type, None);
        // A replay with a token of its own, or none, or the parameters
        // spelled another way (all of which verify): the same key.
        let reordered = b"To=%2B18005551212&Digits=1234&CallSid=CA1234567890ABCDE&Caller=%2B12349013030&From=%2B12349013030";
        assert_eq!(check(DOC_URL, Some(DOC_QUERY), DOC_SIG, reordered), Ok(()));
        for (token, body) in [("a1b2-c3", DOC_BODY), ("other", &reordered[..])] {
            let headers = [
                ("x-twilio-signature", DOC_SIG),
                ("i-twilio-idempotency-token", token),
            ];
            let Ok(Identified::Event(again)) = identify(&headers, body) else {
                panic!("an event");
            };
            assert_eq!(again.delivery_id, expected, "{token}");
        }
        // Another signed request: another key.
        let other = [("x-twilio-signature", "GgNpjAF4EUO7QXgUXfkOioMTbOo=")];
        let Ok(Identified::Event(other)) = identify(&other, DOC_BODY) else {
            panic!("an event");
        };
        assert_ne!(other.delivery_id, expected);
        assert_eq!(
            identify(&[], DOC_BODY),
            Err(IdentifyError::MissingDeliveryId)
        );

        let body = b"MessageSid=SM1&MessageStatus=delivered";
        let Ok(Identified::Event(form)) = identify(&signed, body) else {
            panic!("an event");
        };
        assert_eq!(form.event_type.as_deref(), Some("delivered"));
        let Ok(Identified::Event(json)) = identify(&signed, br#"{"type":"com.twilio.x"}"#) else {
            panic!("an event");
        };
        assert_eq!(json.event_type.as_deref(), Some("com.twilio.x"));
    }
}
