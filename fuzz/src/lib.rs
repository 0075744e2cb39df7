//! Shared by the fuzz targets: the input format, the fixed keys, and an
//! HMAC computed here, independently of `hookbox::ingress::receive::verify`.
//!
//! Every verifier target reads its input as a tiny HTTP-ish text, so the
//! seeds in `fuzz/seeds/` stay readable and libFuzzer's mutations stay
//! meaningful:
//!
//! ```text
//! x-hub-signature-256: sha256=$H0      <- header lines, `name: value`
//! @prefix: sha256=                      <- `@` lines: settings (hmac target)
//!                                       <- first empty line
//! {"body": "..."}                       <- the body, every byte after it
//! ```
//!
//! Header values may hold placeholders the target fills in before the
//! request is verified, so the fuzzer can reach the *accept* path with a
//! correct MAC in arbitrary surroundings: `$T` is [`NOW`] in decimal; `$H0`
//! and `$H1` are the lowercase hex MAC of the target's signed string with
//! key 0 or 1, `$B0` and `$B1` the same in standard base64. Each target
//! then checks on its own that an accepted request really carries the MAC
//! of what it signs (the oracle), so a parser that accepted anything else
//! would be a crash.

use base64::Engine as _;
use hmac::{KeyInit, Mac};
use http::{HeaderMap, HeaderName, HeaderValue};

/// The clock every target verifies at.
pub const NOW: i64 = 1_700_000_000;
/// The tolerance every timestamped target uses (the default).
pub const TOLERANCE: i64 = 300;
/// The raw keys; two, so rotation (any key matches) is exercised.
pub const KEYS: [&[u8]; 2] = [b"fuzz-key-zero", b"fuzz-key-one"];

/// The secrets for kinds whose key is the secret's UTF-8 bytes.
pub fn utf8_secrets() -> Vec<hookbox::config::Secret> {
    KEYS.iter()
        .map(|k| hookbox::config::Secret::new(std::str::from_utf8(k).unwrap()))
        .collect()
}

/// HMAC-SHA256 over the concatenation of `parts`.
pub fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut m = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// True when `text` is the hex of the MAC over `parts` under some key,
/// in either case (hex decoders accept both).
pub fn is_hex_mac(text: &[u8], parts: &[&[u8]]) -> bool {
    KEYS.iter()
        .any(|k| text.eq_ignore_ascii_case(hex::encode(mac(k, parts)).as_bytes()))
}

/// True when `text` is the base64 of the MAC over `parts` under some key.
pub fn is_b64_mac(text: &[u8], parts: &[&[u8]]) -> bool {
    KEYS.iter().any(|k| text == b64(&mac(k, parts)).as_bytes())
}

/// A timestamp the providers' rule accepts: 1 to 12 ASCII digits, within
/// [`TOLERANCE`] of [`NOW`].
pub fn timestamp_ok(raw: &[u8]) -> bool {
    !raw.is_empty()
        && raw.len() <= 12
        && raw.iter().all(u8::is_ascii_digit)
        && std::str::from_utf8(raw)
            .unwrap()
            .parse::<i64>()
            .is_ok_and(|t| (NOW - t).abs() <= TOLERANCE)
}

/// One parsed fuzz input, before placeholders are filled in.
pub struct Input<'a> {
    /// `(name, value)` in order, names as written.
    pub headers: Vec<(&'a [u8], &'a [u8])>,
    /// `@name: value` lines, without the `@`.
    pub settings: Vec<(&'a [u8], &'a [u8])>,
    pub body: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn parse(data: &'a [u8]) -> Input<'a> {
        let (head, body) = match find(data, b"\n\n") {
            Some(i) => (&data[..i], &data[i + 2..]),
            None => (data, &b""[..]),
        };
        let mut headers = Vec::new();
        let mut settings = Vec::new();
        for line in head.split(|&b| b == b'\n') {
            let (name, value) = match find(line, b":") {
                Some(i) => (&line[..i], &line[i + 1..]),
                None => (line, &b""[..]),
            };
            let value = value.strip_prefix(b" ").unwrap_or(value);
            match name.strip_prefix(b"@") {
                Some(setting) => settings.push((setting, value)),
                None => headers.push((name, value)),
            }
        }
        Input {
            headers,
            settings,
            body,
        }
    }

    /// The last value of setting `name`, as text.
    pub fn setting(&self, name: &str) -> Option<String> {
        self.settings
            .iter()
            .rev()
            .find(|(n, _)| *n == name.as_bytes())
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }

    /// The request headers. `$T` is filled in first; then `signed` is
    /// called with those headers to give the parts the MAC covers, and the
    /// MAC placeholders are filled in. Names or values `http` refuses are
    /// dropped (hyper would have refused the request).
    pub fn headers(&self, signed: impl Fn(&HeaderMap) -> Vec<Vec<u8>>) -> HeaderMap {
        let now = NOW.to_string();
        let stage1: Vec<(&[u8], Vec<u8>)> = self
            .headers
            .iter()
            .map(|(n, v)| (*n, replace(v, b"$T", now.as_bytes())))
            .collect();
        let parts = signed(&build(&stage1));
        let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        let macs = [mac(KEYS[0], &parts), mac(KEYS[1], &parts)];
        let stage2: Vec<(&[u8], Vec<u8>)> = stage1
            .into_iter()
            .map(|(n, mut v)| {
                for (i, m) in macs.iter().enumerate() {
                    v = replace(&v, format!("$H{i}").as_bytes(), hex::encode(m).as_bytes());
                    v = replace(&v, format!("$B{i}").as_bytes(), b64(m).as_bytes());
                }
                (n, v)
            })
            .collect();
        build(&stage2)
    }
}

fn build(pairs: &[(&[u8], Vec<u8>)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            map.append(n, v);
        }
    }
    map
}

/// The first value of a header, as the verifiers read it.
pub fn first<'m>(headers: &'m HeaderMap, name: &str) -> Option<&'m [u8]> {
    headers.get(name).map(HeaderValue::as_bytes)
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

pub fn replace(hay: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len());
    let mut rest = hay;
    while let Some(i) = find(rest, needle) {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(with);
        rest = &rest[i + needle.len()..];
    }
    out.extend_from_slice(rest);
    out
}

/// Checks what identification returned, whatever the kind: a delivery id
/// is 1..=256 bytes or a body hash; a handshake's answer is not empty.
pub fn check_identified(
    result: Result<
        hookbox::ingress::receive::payload::Identified,
        hookbox::ingress::receive::payload::IdentifyError,
    >,
) {
    use hookbox::ingress::receive::payload::{Handshake, Identified, MAX_DELIVERY_ID_LEN};
    match result {
        Ok(Identified::Event(id)) => {
            let d = &id.delivery_id;
            assert!(!d.is_empty(), "empty delivery id");
            assert!(
                d.len() <= MAX_DELIVERY_ID_LEN || d.starts_with("sha256:"),
                "delivery id of {} bytes",
                d.len()
            );
        }
        Ok(Identified::Handshake(Handshake::Text(t))) => assert!(!t.is_empty(), "empty challenge"),
        Ok(Identified::Handshake(Handshake::Json(v))) => {
            assert!(v.as_object().is_some_and(|o| !o.is_empty()), "empty answer")
        }
        Ok(Identified::Handshake(Handshake::NoContent)) => {}
        Err(_) => {}
    }
}
