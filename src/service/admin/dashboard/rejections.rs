//! `GET /rejections`: the requests `/hooks/*` refused, newest first, each
//! reason put in words for a person, with a link to the manual's section
//! that helps (the book's pages as the repository shows them).
//!
//! Reads what `/api/rejections` reads; what a row can hold (never a body,
//! a secret or a header value) is decided in `crate::store::rejections`.

use axum::Extension;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use maud::{Markup, html};
use serde::Deserialize;

use super::pages::parse_query;
use super::session::Session;
use super::view::{self, excerpt, link, time};
use super::{Dashboard, PageError};
use crate::service::admin::DEFAULT_LIMIT;
use crate::store::rejections::{self, FOLD_WINDOW_MS, KEEP, RejectionFilter, RejectionRow};
use crate::support::error::ApiError;

/// Where the manual helps with signatures and clocks (tests/it/book.rs
/// checks that every `docs/src/` link in the code names a real page and
/// heading).
const SIGNATURES: &str = concat!(
    env!("CARGO_PKG_REPOSITORY"),
    "/blob/main/docs/src/troubleshooting.md#troubleshooting-signature-failures"
);
/// Where the manual helps with every other refusal.
const REFUSALS: &str = concat!(
    env!("CARGO_PKG_REPOSITORY"),
    "/blob/main/docs/src/troubleshooting.md#troubleshooting-refused-requests"
);
/// Where the manual explains proxies, allowlists and the failure limit.
const EDGE: &str = concat!(
    env!("CARGO_PKG_REPOSITORY"),
    "/blob/main/docs/src/running/edge.md"
);

/// The page's query string.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RejectionsQuery {
    source: Option<String>,
    before: Option<String>,
}

/// `GET /rejections`
pub(super) async fn list(
    State(st): State<Dashboard>,
    Extension(session): Extension<Session>,
    query: Result<Query<RejectionsQuery>, QueryRejection>,
) -> Result<Markup, PageError> {
    let query = parse_query(query)?;
    let before = match query.before.as_deref().filter(|v| !v.is_empty()) {
        None => None,
        Some(v) => Some(v.parse::<i64>().ok().filter(|id| *id > 0).ok_or_else(|| {
            ApiError::bad_request("invalid_filter", "before: must be a rejection id")
        })?),
    };
    let filter = RejectionFilter {
        source: query.source.filter(|s| !s.is_empty()),
        limit: DEFAULT_LIMIT,
        before,
    };
    let source = filter.source.clone();
    let page = st
        .admin
        .store
        .read(move |c| rejections::list(c, &filter))
        .await?;
    let configured = |name: &str| st.admin.config.source(name).is_some();
    let older = page.next_before.map(|id| {
        let id = id.to_string();
        link(
            "/rejections",
            &[("source", source.as_deref()), ("before", Some(&id))],
        )
    });
    let content = html! {
        p {
            "Requests to " code { "/hooks/…" } " that hookbox refused, newest first; the newest "
            (thousands(KEEP)) " are kept. Only header names, the body's size and its content type are kept: "
            "never a header value, a signature or a body. "
            "The same refusal repeated (same source, client, status and reason) within "
            (FOLD_WINDOW_MS / 1000) " s of a row's first is counted in that row."
        }
        form.filters method="get" action="/rejections" {
            label { "Source" input type="text" name="source" value=[source.as_deref()]; }
            button type="submit" { "Filter" }
        }
        @if page.rejections.is_empty() {
            p { "No refused requests." }
        } @else {
            table {
                tr {
                    th { "Time" } th { "Source" } th { "Client" } th { "Status" }
                    th { "Why" } th { "Headers sent" } th { "Body" }
                }
                @for r in &page.rejections {
                    @let (words, help) = explain(r, configured(&r.source));
                    tr {
                        td {
                            (time(r.at))
                            @if r.repeats > 0 {
                                br;
                                (repeated(r.repeats, r.last_at))
                            }
                        }
                        td { a href=(link("/rejections", &[("source", Some(&r.source))])) { (r.source) } }
                        td { code { (r.client.as_deref().unwrap_or("unknown")) } }
                        td.n { (r.status) }
                        td {
                            code { (r.reason) } br;
                            (words) " "
                            a href=(help) { "Troubleshooting →" }
                        }
                        td { code { (excerpt(&r.header_names.join(", "), 300)) } }
                        td {
                            (r.body_bytes.map(|b| size(b.max(0) as u64)).unwrap_or_else(|| "-".into()))
                            @if let Some(ct) = &r.content_type { br; code { (ct) } }
                        }
                    }
                }
            }
        }
        @if let Some(older) = older { p { a href=(older) { "Older →" } } }
    };
    Ok(view::page(
        "Rejected requests",
        Some(&session.csrf),
        None,
        content,
    ))
}

/// How many more refusals a row stands for, and until when.
fn repeated(repeats: i64, last_at: Option<i64>) -> String {
    let more = format!("and {} more like it", thousands(repeats));
    match last_at {
        Some(last) => format!("{more}, the last at {}", time(last)),
        None => more,
    }
}

/// What a refusal means, in words for a person, and where to read more.
/// `configured`: the source named is in the config now.
fn explain(r: &RejectionRow, configured: bool) -> (String, &'static str) {
    let d = &r.detail;
    let client = r.client.as_deref().unwrap_or("the client");
    match r.reason.as_str() {
        "invalid_signature" => {
            let matched = match d.secrets {
                Some(1) => "did not match the source's secret".to_owned(),
                Some(n) => format!("matched none of the {n} secrets"),
                None => "matched none of the source's secrets".to_owned(),
            };
            (
                format!(
                    "The signature {matched}: either the sender signs with a secret not \
                     listed (rotated at one end only: during a rotation list both), or something \
                     on the way changed the bytes: a proxy that re-encodes JSON, decompresses or \
                     converts the charset changes them."
                ),
                SIGNATURES,
            )
        }
        "missing_signature" => (
            "No signature header came with it: the hook has no secret set at the provider, the URL \
             names a source of another kind, or a proxy dropped the header."
                .into(),
            SIGNATURES,
        ),
        "malformed_signature" => (
            "The signature header was not in the form this kind of source expects: check that the \
             source's kind matches the provider (or the hmac prefix and encoding)."
                .into(),
            SIGNATURES,
        ),
        "missing_timestamp" | "malformed_timestamp" => (
            "The signed timestamp was missing or not a plain number: check that the source's kind \
             matches the provider, and that no proxy drops the header."
                .into(),
            SIGNATURES,
        ),
        "timestamp_out_of_tolerance" => (clock(d.age_secs, d.tolerance_secs), SIGNATURES),
        "body_too_large" => (
            format!(
                "The body{} is over the source's limit{} (max_body_bytes); raise it for this source \
                 if the provider really sends bodies this large.",
                r.body_bytes
                    .map(|b| format!(" ({})", size(b.max(0) as u64)))
                    .unwrap_or_default(),
                d.max_body_bytes
                    .map(|b| format!(" of {}", size(b)))
                    .unwrap_or_default(),
            ),
            REFUSALS,
        ),
        "body_timeout" => (
            format!(
                "The body did not arrive within {} (server.body_timeout): a stalled or very slow \
                 connection. It counts toward the client's failure limit.",
                d.body_timeout_secs
                    .map(|s| duration(s as i64))
                    .unwrap_or_else(|| "the body timeout".into())
            ),
            REFUSALS,
        ),
        "body_unreadable" => (
            "The connection broke while the body was being read; the provider will retry.".into(),
            REFUSALS,
        ),
        "missing_delivery_id" => (
            "The signature was right, but the request carried no delivery id where this kind \
             keeps it, so it could not be stored without risking duplicates."
                .into(),
            REFUSALS,
        ),
        "invalid_json" => (
            "The signature was right, but the body is not the JSON this kind needs to read its \
             delivery id."
                .into(),
            REFUSALS,
        ),
        "unknown_source" if configured => (
            "The source was not configured when this came in (it is now).".into(),
            REFUSALS,
        ),
        "unknown_source" => (
            format!(
                "No source named \u{201c}{}\u{201d} is configured: compare the URL the provider posts to \
                 with the names of [[sources]] (spelling, case), or the source was removed or \
                 disabled.",
                r.source
            ),
            REFUSALS,
        ),
        "forbidden_address" if d.cause.as_deref() == Some("set_unavailable") => (
            format!(
                "{client} is not in the source's allow_ips CIDRs, and a named set (github or stripe) \
                 could not be checked because it has not been fetched yet; see the log for the \
                 refresh."
            ),
            EDGE,
        ),
        "forbidden_address" => (
            format!(
                "{client} is not in the source's allow_ips. Behind a proxy, set \
                 server.trusted_proxies so hookbox sees the client's address rather than the \
                 proxy's; if the provider added ranges, add them."
            ),
            EDGE,
        ),
        "malformed_forwarding_header" | "unknown_client" => (
            "A trusted proxy's forwarding header named no client address hookbox could read \
             (junk, or an obfuscated or unknown hop); check the proxy's X-Forwarded-For or \
             Forwarded setting and server.forwarded_header."
                .into(),
            EDGE,
        ),
        "too_many_failures" => (
            format!(
                "{client} failed verification too often and is blocked{} (edge.max_failures, \
                 edge.block_for). It usually follows a run of bad signatures: fix those and it \
                 clears by itself.",
                d.retry_after_secs
                    .map(|s| format!(" for {} more", duration(s as i64)))
                    .unwrap_or_default()
            ),
            EDGE,
        ),
        "unavailable" if d.cause.as_deref() == Some("body_budget") => (
            "Too many bodies were being read at once, from everyone or from this address \
             (edge.max_client_body_bytes, edge.max_client_bodies); answered 503 so the provider \
             retries."
                .into(),
            EDGE,
        ),
        "unavailable" => (
            "hookbox could not store the event (disk full, the database unwritable, or the writer \
             overloaded); answered 503 so the provider retries. See the log and /readyz."
                .into(),
            REFUSALS,
        ),
        "method_not_allowed" => (
            "A GET to a source that only takes POST (only meta sources answer GET, for their \
             subscription handshake)."
                .into(),
            REFUSALS,
        ),
        "invalid_verify_token" => (
            "A subscription handshake with the wrong hub.verify_token: it must equal the source's \
             verify_token."
                .into(),
            REFUSALS,
        ),
        "not_a_handshake" => (
            "A GET that was not a subscription handshake (no hub.mode=subscribe).".into(),
            REFUSALS,
        ),
        other => (format!("Refused with {other}."), REFUSALS),
    }
}

/// The clock explanation of a `timestamp_out_of_tolerance`.
fn clock(age_secs: Option<i64>, tolerance_secs: Option<u64>) -> String {
    let tolerance = tolerance_secs
        .map(|t| format!("; the tolerance is {}", duration(t as i64)))
        .unwrap_or_default();
    match age_secs {
        Some(age) if age < 0 => format!(
            "The timestamp was {} in the future{tolerance}: this server's clock is behind the \
             sender's. Check it (timedatectl: NTP synchronized).",
            duration(-age)
        ),
        Some(age) => format!(
            "The timestamp was {} old{tolerance}: check the server's clock (timedatectl: NTP \
             synchronized), or an old request was sent again as it was (provider retries are \
             signed afresh).",
            duration(age)
        ),
        None => format!("The timestamp was outside the tolerance{tolerance}."),
    }
}

/// `secs` in the largest whole unit a person would say.
fn duration(secs: i64) -> String {
    let (n, unit) = match secs {
        s if s >= 2 * 86_400 => (s / 86_400, "day"),
        s if s >= 2 * 3_600 => (s / 3_600, "hour"),
        s if s >= 120 => (s / 60, "minute"),
        s => (s, "second"),
    };
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

/// `n` with a comma every three digits.
fn thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// Bytes as a person reads them.
fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::rejections::Detail;

    fn row(reason: &str, detail: Detail) -> RejectionRow {
        RejectionRow {
            id: 1,
            at: 0,
            source: "github".into(),
            client: Some("192.0.2.7".into()),
            status: 401,
            reason: reason.into(),
            header_names: vec![],
            body_bytes: Some(30 << 20),
            content_type: None,
            detail,
            repeats: 0,
            last_at: None,
        }
    }

    #[test]
    fn each_reason_is_put_in_words_with_its_facts() {
        let sig = Detail {
            secrets: Some(2),
            ..Detail::default()
        };
        let (words, help) = explain(&row("invalid_signature", sig), true);
        assert!(
            words.starts_with("The signature matched none of the 2 secrets:"),
            "{words}"
        );
        assert!(words.contains("re-encodes JSON") && help == SIGNATURES);
        let old = Detail {
            age_secs: Some(420),
            tolerance_secs: Some(300),
            ..Detail::default()
        };
        let (words, _) = explain(&row("timestamp_out_of_tolerance", old), true);
        assert!(
            words.starts_with("The timestamp was 7 minutes old; the tolerance is 5 minutes")
                && words.contains("clock"),
            "{words}"
        );
        let ahead = Detail {
            age_secs: Some(-90),
            tolerance_secs: Some(60),
            ..Detail::default()
        };
        let (words, _) = explain(&row("timestamp_out_of_tolerance", ahead), true);
        assert!(words.contains("90 seconds in the future"), "{words}");
        let big = Detail {
            max_body_bytes: Some(25 << 20),
            ..Detail::default()
        };
        let (words, _) = explain(&row("body_too_large", big), true);
        assert!(
            words.contains("(30.0 MiB)") && words.contains("of 25.0 MiB"),
            "{words}"
        );
        let (words, _) = explain(&row("unknown_source", Detail::default()), false);
        assert!(
            words.contains("No source named \u{201c}github\u{201d}"),
            "{words}"
        );
        let (words, help) = explain(&row("forbidden_address", Detail::default()), true);
        assert!(
            words.starts_with("192.0.2.7 is not in") && help == EDGE,
            "{words}"
        );
    }

    #[test]
    fn durations_read_as_a_person_says_them() {
        assert_eq!(duration(1), "1 second");
        assert_eq!(duration(119), "119 seconds");
        assert_eq!(duration(300), "5 minutes");
        assert_eq!(duration(7_200), "2 hours");
        assert_eq!(duration(3 * 86_400), "3 days");
        assert_eq!(size(512), "512 bytes");
        assert_eq!(thousands(10_000), "10,000");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
