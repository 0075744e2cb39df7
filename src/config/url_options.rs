//! A url destination's `method` and `headers`: what a receiver that is not
//! a Standard Webhooks verifier (a chat's incoming webhook, an API that
//! wants a bearer token) needs.
//!
//! Header values are secret references or literals, resolved at load like
//! every secret (`RawConfig::secrets_mut` lists them, so `hookbox check`
//! redacts them and commands go without their variables); the resolved
//! values are marked sensitive, and [`UrlOptions`]'s `Debug` shows only
//! the names.

use std::collections::BTreeMap;
use std::fmt;

use reqwest::header::{HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};

use super::secret;

/// The HTTP method of a url destination's requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    #[default]
    Post,
    Put,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Post => "POST",
            Method::Put => "PUT",
        }
    }
}

/// A url destination's validated options.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct UrlOptions {
    pub method: Method,
    /// Sent with every request, after hookbox's own headers (which they
    /// may not name); values marked sensitive.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

/// Written by hand: header values may be secrets.
impl fmt::Debug for UrlOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UrlOptions")
            .field("method", &self.method)
            .field(
                "headers",
                &self
                    .headers
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Headers hookbox writes itself, which a destination's `headers` may not
/// set: the body's framing and type, and the signature's.
fn reserved(name: &str) -> bool {
    matches!(
        name,
        "content-type" | "content-length" | "transfer-encoding" | "host" | "connection"
    ) || name.starts_with("webhook-")
        || name.starts_with("x-hookbox-")
}

/// Checks `method` and `headers` of the url destination at `at`.
pub fn validate(
    method: Option<Method>,
    headers: &BTreeMap<String, String>,
    at: &str,
    problems: &mut Vec<String>,
) -> Option<UrlOptions> {
    let before = problems.len();
    let mut found = Vec::with_capacity(headers.len());
    for (name, reference) in headers {
        let key = format!("{at}.headers.{name:?}");
        let Ok(header) = HeaderName::from_bytes(name.as_bytes()) else {
            problems.push(format!("{key}: not an HTTP header name"));
            continue;
        };
        if reserved(header.as_str()) {
            problems.push(format!(
                "{key}: hookbox sets this header itself (content type and length, webhook-*, x-hookbox-*)"
            ));
            continue;
        }
        match secret::resolve(reference) {
            Ok(value) => match HeaderValue::from_str(value.expose()) {
                Ok(mut value) => {
                    value.set_sensitive(true);
                    found.push((header, value));
                }
                Err(_) => problems.push(format!(
                    "{key} ({}): not a valid header value (control characters or a line break)",
                    secret::describe(reference)
                )),
            },
            Err(why) => problems.push(format!("{key} ({}): {why}", secret::describe(reference))),
        }
    }
    (problems.len() == before).then(|| UrlOptions {
        method: method.unwrap_or_default(),
        headers: found,
    })
}

/// `method` and `headers` where nothing is sent over HTTP are mistakes.
pub fn refuse(
    method: Option<Method>,
    headers: &BTreeMap<String, String>,
    at: &str,
    what: &str,
    problems: &mut Vec<String>,
) {
    if method.is_some() {
        problems.push(format!(
            "{at}.method: only for url destinations ({what} is not sent HTTP requests)"
        ));
    }
    if !headers.is_empty() {
        problems.push(format!(
            "{at}.headers: only for url destinations ({what} is not sent HTTP requests)"
        ));
    }
}
