//! The page frame and the small pieces every page uses: times, states,
//! links with query strings, the CSRF field. Everything spliced into
//! markup with `(value)` is escaped by maud; the only `PreEscaped` is the
//! style sheet, a constant.

use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::CSS;
use crate::store::models::State;

/// A whole page: the navigation (with a logout button when `csrf` is
/// given), an optional notice, and `content`.
pub(super) fn page(
    title: &str,
    csrf: Option<&str>,
    notice: Option<&str>,
    content: Markup,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · hookbox" }
                style { (PreEscaped(CSS)) }
            }
            body {
                header {
                    b { "hookbox" }
                    @if csrf.is_some() {
                        nav {
                            a href="/" { "Overview" }
                            a href="/events" { "Inbox" }
                            a href="/dead" { "Dead letters" }
                            a href="/catch-up" { "Catch-up runs" }
                            a href="/rejections" { "Rejected requests" }
                        }
                    }
                    @if let Some(csrf) = csrf {
                        form method="post" action="/logout" {
                            (csrf_field(csrf))
                            button type="submit" { "Log out" }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    @if let Some(notice) = notice {
                        p.notice role="status" { (notice) }
                    }
                    (content)
                }
            }
        }
    }
}

/// The login page, with `error` when the last try was refused.
pub(super) fn login(error: Option<&str>) -> Markup {
    page(
        "Log in",
        None,
        None,
        html! {
            @if let Some(error) = error {
                p.error role="alert" { (error) }
            }
            p { "Paste the admin token: " code { "admin.token" } " from the config, or the "
                code { "admin-token" } " file next to the database." }
            form method="post" action="/login" {
                label { "Admin token"
                    input type="password" name="token" autocomplete="current-password" required autofocus;
                }
                p { button type="submit" { "Log in" } }
            }
        },
    )
}

/// A page saying what went wrong.
pub(super) fn error_page(title: &str, message: &str) -> Markup {
    page(
        title,
        None,
        None,
        html! {
            p.error { (message) }
            p { a href="/" { "Back to the dashboard" } }
        },
    )
}

pub(super) fn csrf_field(csrf: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(csrf); }
}

/// Unix milliseconds as RFC 3339, to the second, UTC.
pub(super) fn time(ms: i64) -> String {
    crate::support::clock::format_ms(ms)
}

pub(super) fn opt_time(ms: Option<i64>) -> String {
    ms.map(time).unwrap_or_else(|| "-".to_owned())
}

/// An event's or a delivery's state, coloured.
pub(super) fn state(state: State) -> Markup {
    html! { span class={ "state " (state) } { (state) } }
}

/// `text` cut to `max` characters, for table cells.
pub(super) use crate::support::excerpt::chars as excerpt;

/// `path?k=v&...` with the non-empty values percent-encoded.
pub(super) fn link(path: &str, pairs: &[(&str, Option<&str>)]) -> String {
    let query: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| {
            v.filter(|v| !v.is_empty())
                .map(|v| format!("{k}={}", encode(v)))
        })
        .collect();
    if query.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", query.join("&"))
    }
}

fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_encode_their_values_and_skip_empty_ones() {
        assert_eq!(link("/events", &[("source", None)]), "/events");
        assert_eq!(
            link(
                "/events",
                &[
                    ("source", Some("a b&c")),
                    ("state", Some("")),
                    ("before", Some("7"))
                ]
            ),
            "/events?source=a%20b%26c&before=7"
        );
    }

    #[test]
    fn spliced_text_is_escaped() {
        let html = page(
            "<x-title>",
            Some("c\"srf"),
            Some("<script>"),
            html! { (state(State::Dead)) },
        )
        .into_string();
        for raw in ["<script>", "<x-title>"] {
            assert!(!html.contains(raw), "{raw} in {html}");
        }
        assert!(html.contains("&lt;script&gt;") && html.contains("c&quot;srf"));
        assert_eq!(excerpt("abcdef", 4), "abc…");
    }
}
