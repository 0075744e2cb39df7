//! HTTP helpers the catch-up jobs share: `Link` headers, `Retry-After`,
//! provider timestamps, and a short, safe excerpt of an error body.

use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::{RequestBuilder, Response, StatusCode};

use super::{RateLimited, RunCtx};

/// The longest a pass waits out one rate limit while reading a list; a
/// provider asking for longer gets the rest in the next pass.
pub const MAX_LIST_WAIT: Duration = Duration::from_secs(5 * 60);

/// Rate limits in a row on one list request before the pass gives up.
const MAX_LIST_WAITS: u32 = 3;

/// A 429, with the wait the provider asked for (`Retry-After`), if it said.
pub fn rate_limit(
    response: &Response,
    provider: &'static str,
) -> Option<(Option<Duration>, RateLimited)> {
    if response.status() != StatusCode::TOO_MANY_REQUESTS {
        return None;
    }
    let wait = retry_after(response.headers());
    let detail = match wait {
        Some(w) => format!("retry after {}s", w.as_secs()),
        None => "status 429".to_owned(),
    };
    Some((wait, RateLimited { provider, detail }))
}

/// Sends the request `build` makes; on a 429 waits what the provider asked
/// (a second when it did not say) and sends it again, up to a bound. The
/// answer past the bound is returned as it came, for the caller's check.
pub async fn send_waiting(
    ctx: &RunCtx<'_>,
    provider: &'static str,
    build: impl Fn() -> RequestBuilder,
) -> anyhow::Result<Response> {
    let mut waits = 0;
    loop {
        let response = build().send().await?;
        let Some((wait, _)) = rate_limit(&response, provider) else {
            return Ok(response);
        };
        let wait = wait.unwrap_or(Duration::from_secs(1));
        waits += 1;
        if waits > MAX_LIST_WAITS || wait > MAX_LIST_WAIT {
            return Ok(response);
        }
        tracing::info!(
            wait_ms = wait.as_millis() as u64,
            "{provider} rate limit reached; waiting before reading on"
        );
        ctx.pause(wait).await;
        ctx.step().await?;
    }
}

/// The start of an error body, for a log line or a run's error: never
/// more than 300 bytes, control characters escaped.
pub async fn excerpt(response: Response) -> String {
    let bytes = response.bytes().await.unwrap_or_default();
    crate::support::excerpt::bytes(&bytes[..bytes.len().min(300)])
}

/// The `code` and `detail` of the JSON error object at `pointer` in an
/// error body (`/error` for Paddle, `/errors/0` for Square), empty when
/// absent; the detail as [`excerpt`] cuts it.
pub async fn error_fields(response: Response, pointer: &str) -> (String, String) {
    let bytes = response.bytes().await.unwrap_or_default();
    let error = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v.pointer(pointer).cloned())
        .unwrap_or_default();
    let text = |k: &str| error.get(k).and_then(|v| v.as_str()).unwrap_or("");
    let detail = text("detail");
    let cut = crate::support::excerpt::bytes(&detail.as_bytes()[..detail.len().min(300)]);
    (text("code").to_owned(), cut)
}

/// The `rel="next"` URL of a `Link` header, exactly as written.
pub fn next_link(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(reqwest::header::LINK)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|part| {
            let (url, params) = part.trim().split_once(';')?;
            let is_next = params.split(';').any(|p| {
                let p = p.trim().replace(' ', "");
                p == "rel=\"next\"" || p == "rel=next"
            });
            let url = url.trim().strip_prefix('<')?.strip_suffix('>')?;
            is_next.then(|| url.to_owned())
        })
}

/// An RFC 3339 time (`2024-05-01T12:00:00Z`, with an optional fraction and
/// `Z` or `±HH:MM`) as unix milliseconds.
pub fn parse_time(text: &str) -> Option<i64> {
    let split = text
        .len()
        .checked_sub(6)
        .filter(|i| text.is_char_boundary(*i))
        .map(|i| text.split_at(i));
    let (base, offset_secs) = match split {
        Some((base, off))
            if off.is_ascii()
                && (off.starts_with('+') || off.starts_with('-'))
                && &off[3..4] == ":" =>
        {
            let sign = if off.starts_with('-') { -1 } else { 1 };
            let h: i64 = off[1..3].parse().ok()?;
            let m: i64 = off[4..6].parse().ok()?;
            (format!("{base}Z"), sign * (h * 3600 + m * 60))
        }
        _ => (text.to_owned(), 0),
    };
    let t = humantime::parse_rfc3339_weak(base.trim_end_matches('Z')).ok()?;
    let ms = t.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as i64;
    Some(ms - offset_secs * 1000)
}

/// `Retry-After` in seconds (the form the providers use), capped at a day.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let secs: u64 = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(secs.min(24 * 3600)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn response(body: &str) -> Response {
        Response::from(axum::http::Response::new(body.to_owned()))
    }

    #[tokio::test]
    async fn error_fields_read_paddles_and_squares_shapes_and_cut_the_detail() {
        let paddle = r#"{"error":{"type":"request_error","code":"forbidden","detail":"no"}}"#;
        let fields = error_fields(response(paddle), "/error").await;
        assert_eq!(fields, ("forbidden".to_owned(), "no".to_owned()));
        let long = "x".repeat(1000);
        let square = format!(r#"{{"errors":[{{"code":"UNAUTHORIZED","detail":"{long}\n"}}]}}"#);
        let (code, detail) = error_fields(response(&square), "/errors/0").await;
        assert_eq!((code.as_str(), detail.len()), ("UNAUTHORIZED", 300));
        let (code, detail) = error_fields(response("<html>bad gateway"), "/error").await;
        assert_eq!((code.as_str(), detail.as_str()), ("", ""));
    }

    #[test]
    fn next_links_are_taken_verbatim_from_among_the_others() {
        let mut h = HeaderMap::new();
        h.insert(
            reqwest::header::LINK,
            HeaderValue::from_static(
                "<https://api.github.com/repositories/1/hooks/2/deliveries?per_page=100&cursor=v1_9>; rel=\"next\", <https://x/prev>; rel=\"prev\"",
            ),
        );
        assert_eq!(
            next_link(&h).as_deref(),
            Some(
                "https://api.github.com/repositories/1/hooks/2/deliveries?per_page=100&cursor=v1_9"
            )
        );
        h.insert(
            reqwest::header::LINK,
            HeaderValue::from_static("<https://x/prev>; rel=\"prev\""),
        );
        assert_eq!(next_link(&h), None);
    }

    #[test]
    fn retry_after_takes_seconds_and_ignores_dates() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static(" 7"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        h.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn times_parse_with_z_fractions_and_offsets() {
        let z = parse_time("2021-06-03T00:57:16Z").unwrap();
        assert_eq!(z, 1_622_681_836_000);
        assert_eq!(parse_time("2021-06-03T00:57:16.500Z"), Some(z + 500));
        assert_eq!(parse_time("2021-06-03T02:57:16+02:00"), Some(z));
        assert_eq!(parse_time("yesterday"), None);
    }
}
