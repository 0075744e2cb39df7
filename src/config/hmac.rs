//! The generic HMAC-SHA256 scheme (`kind = "hmac"`), for signers no
//! other kind covers: the `[sources.hmac]` table, and its validated form
//! with the signed-payload template parsed into parts, so the receiver
//! only concatenates.

use serde::{Deserialize, Serialize};

/// The generic HMAC-SHA256 scheme, for signers no other kind covers.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawHmac {
    /// Header carrying the signature, e.g. `X-Signature`.
    pub header: String,
    /// Text before the encoded MAC in that header, e.g. `sha256=`.
    #[serde(default)]
    pub prefix: String,
    #[serde(default)]
    pub encoding: Encoding,
    /// Header carrying a unix-seconds timestamp, checked against `tolerance`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp_header: Option<String>,
    /// What is signed: `{body}` and `{timestamp}` placeholders around literal
    /// text. Default `{timestamp}.{body}` with a timestamp header, else `{body}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_payload: Option<String>,
    /// Delivery id from this header, or from `id_pointer` in a JSON body;
    /// with neither, the SHA-256 of the body is the id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_header: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_pointer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_type_header: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_type_pointer: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    #[default]
    Hex,
    Base64,
}

#[derive(Debug, Clone)]
pub struct HmacConfig {
    /// Lowercased header names (the `HeaderMap` stores them so).
    pub header: String,
    pub prefix: String,
    pub encoding: Encoding,
    pub timestamp_header: Option<String>,
    pub signed_payload: Vec<PayloadPart>,
    pub id: IdFrom,
    pub event_type: Option<Field>,
}

/// One piece of the generic scheme's signed string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadPart {
    Literal(Vec<u8>),
    Timestamp,
    Body,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    Header(String),
    Pointer(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdFrom {
    Field(Field),
    BodyHash,
}

pub(super) fn validate(h: &RawHmac, at: &str, problems: &mut Vec<String>) -> Option<HmacConfig> {
    let before = problems.len();
    let header_ok = |name: &str| axum::http::HeaderName::from_bytes(name.as_bytes()).is_ok();
    for (key, name) in [
        ("header", Some(&h.header)),
        ("timestamp_header", h.timestamp_header.as_ref()),
        ("id_header", h.id_header.as_ref()),
        ("event_type_header", h.event_type_header.as_ref()),
    ] {
        if let Some(name) = name
            && !header_ok(name)
        {
            problems.push(format!("{at}.{key}: {name:?} is not a valid header name"));
        }
    }
    for (key, pointer) in [
        ("id_pointer", h.id_pointer.as_ref()),
        ("event_type_pointer", h.event_type_pointer.as_ref()),
    ] {
        if let Some(p) = pointer
            && !p.starts_with('/')
        {
            problems.push(format!("{at}.{key}: a JSON pointer starts with '/'"));
        }
    }
    let id = match (&h.id_header, &h.id_pointer) {
        (Some(_), Some(_)) => {
            problems.push(format!("{at}: set id_header or id_pointer, not both"));
            IdFrom::BodyHash
        }
        (Some(name), None) => IdFrom::Field(Field::Header(name.to_ascii_lowercase())),
        (None, Some(p)) => IdFrom::Field(Field::Pointer(p.clone())),
        (None, None) => IdFrom::BodyHash,
    };
    let event_type = match (&h.event_type_header, &h.event_type_pointer) {
        (Some(_), Some(_)) => {
            problems.push(format!(
                "{at}: set event_type_header or event_type_pointer, not both"
            ));
            None
        }
        (Some(name), None) => Some(Field::Header(name.to_ascii_lowercase())),
        (None, Some(p)) => Some(Field::Pointer(p.clone())),
        (None, None) => None,
    };
    let template = h.signed_payload.clone().unwrap_or_else(|| {
        if h.timestamp_header.is_some() {
            "{timestamp}.{body}".to_owned()
        } else {
            "{body}".to_owned()
        }
    });
    let signed_payload = match parse_template(&template) {
        Ok(parts) => {
            let signs_timestamp = parts.contains(&PayloadPart::Timestamp);
            if signs_timestamp && h.timestamp_header.is_none() {
                problems.push(format!(
                    "{at}.signed_payload: uses {{timestamp}} but no timestamp_header is set"
                ));
            }
            // A timestamp that is checked but not signed can be replaced
            // by anyone replaying a captured request: the window would
            // only look like replay protection.
            if !signs_timestamp && h.timestamp_header.is_some() {
                problems.push(format!(
                    "{at}.signed_payload: must include {{timestamp}} when timestamp_header is set, \
                     or a replayed request passes with a fresh timestamp (leave timestamp_header \
                     out if the sender does not sign one)"
                ));
            }
            parts
        }
        Err(why) => {
            problems.push(format!("{at}.signed_payload: {why}"));
            Vec::new()
        }
    };
    (problems.len() == before).then(|| HmacConfig {
        header: h.header.to_ascii_lowercase(),
        prefix: h.prefix.clone(),
        encoding: h.encoding,
        timestamp_header: h.timestamp_header.as_ref().map(|s| s.to_ascii_lowercase()),
        signed_payload,
        id,
        event_type,
    })
}

/// Splits `"{timestamp}.{body}"` into parts. `{body}` must appear exactly once.
fn parse_template(template: &str) -> Result<Vec<PayloadPart>, String> {
    let mut parts = Vec::new();
    let mut rest = template;
    let mut literal = String::new();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("{body}") {
            push_literal(&mut parts, &mut literal);
            parts.push(PayloadPart::Body);
            rest = r;
        } else if let Some(r) = rest.strip_prefix("{timestamp}") {
            push_literal(&mut parts, &mut literal);
            parts.push(PayloadPart::Timestamp);
            rest = r;
        } else if rest.starts_with('{') {
            return Err("only the placeholders {body} and {timestamp} are known".to_owned());
        } else {
            let c = rest.chars().next().expect("rest is not empty");
            literal.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    push_literal(&mut parts, &mut literal);
    if parts.iter().filter(|p| **p == PayloadPart::Body).count() != 1 {
        return Err("must contain {body} exactly once".to_owned());
    }
    Ok(parts)
}

fn push_literal(parts: &mut Vec<PayloadPart>, literal: &mut String) {
    if !literal.is_empty() {
        parts.push(PayloadPart::Literal(std::mem::take(literal).into_bytes()));
    }
}
