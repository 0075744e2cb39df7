//! A url destination's URL: a secret reference like the other credentials
//! (a chat's incoming-webhook URL carries its token in the path), resolved
//! at load, and shown everywhere (`hookbox check`, the dashboard, the API,
//! log lines, errors, `hookbox try`) as [`shown`]: scheme, host and port,
//! and `/…` for whatever path or query it has. A literal URL is shown the
//! same way: which paths carry tokens cannot be known.

use std::fmt;

use super::secret::{self, Secret};

/// The resolved URL and how it is shown. `Debug` shows only the latter.
#[derive(Clone, PartialEq, Eq)]
pub struct TargetUrl {
    url: reqwest::Url,
    shown: String,
}

impl TargetUrl {
    /// Resolves `reference` (at `at`, e.g. `...deliver.url`) and checks it
    /// is an http(s) URL with a host. Messages never hold the URL, only
    /// the reference's kind (`[redacted]` for a literal).
    pub(super) fn resolve(reference: &str, at: &str, problems: &mut Vec<String>) -> Option<Self> {
        let (_, url) = resolve_url(reference, &["http", "https"], at, problems)?;
        Some(TargetUrl::new(url))
    }

    /// A URL taken as valid.
    pub fn new(url: reqwest::Url) -> Self {
        TargetUrl {
            shown: shown(&url),
            url,
        }
    }

    /// The whole URL, for the HTTP client only.
    pub fn expose(&self) -> &reqwest::Url {
        &self.url
    }

    /// [`shown`], safe for any output.
    pub fn shown(&self) -> &str {
        &self.shown
    }
}

/// Resolves a URL's secret `reference` (at `at`) and checks it is a URL
/// with a host and one of `schemes`: the secret as written and the parsed
/// URL. Messages name the reference's kind, never the URL (which may hold
/// a token or a password); broker URLs are checked here too.
pub(super) fn resolve_url(
    reference: &str,
    schemes: &[&str],
    at: &str,
    problems: &mut Vec<String>,
) -> Option<(Secret, reqwest::Url)> {
    let described = secret::describe(reference);
    let text = match secret::resolve(reference) {
        Ok(text) => text,
        Err(why) => {
            problems.push(format!("{at} ({described}): {why}"));
            return None;
        }
    };
    let url = match reqwest::Url::parse(text.expose()) {
        Ok(url) => url,
        Err(e) => {
            problems.push(format!("{at} ({described}): not a URL: {e}"));
            return None;
        }
    };
    if !schemes.contains(&url.scheme()) {
        problems.push(format!(
            "{at} ({described}): the scheme must be {}",
            or_list(schemes)
        ));
        return None;
    }
    if url.host_str().is_none_or(str::is_empty) {
        problems.push(format!("{at} ({described}): has no host"));
        return None;
    }
    Some((text, url))
}

/// `a`, `a or b`, `a, b or c`.
fn or_list(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

impl fmt::Debug for TargetUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

/// `scheme://host[:port]`, then `/…` when the URL has a path other than
/// `/`, a query or a fragment; never the user, password, path or query.
pub fn shown(url: &reqwest::Url) -> String {
    let mut text = origin(url);
    if url.path() != "/" && !url.path().is_empty()
        || url.query().is_some()
        || url.fragment().is_some()
    {
        text.push_str("/…");
    }
    text
}

/// `scheme://host[:port]`: what a broker's URL shows, and how a url
/// destination's begins.
pub fn origin(url: &reqwest::Url) -> String {
    let host = url.host_str().unwrap_or("");
    match url.port() {
        Some(port) => format!("{}://{host}:{port}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    }
}

/// How the config's `url` is shown (`hookbox check`, `Debug`): the
/// reference for `env:`/`file:`/`cred:`, a literal as [`shown`], or
/// `[redacted]` when it is no URL (it may be a secret mistyped).
pub fn shown_reference(reference: &str) -> String {
    let described = secret::describe(reference);
    if described != "[redacted]" {
        return described;
    }
    match reqwest::Url::parse(reference) {
        Ok(url) if url.host_str().is_some_and(|h| !h.is_empty()) => shown(&url),
        _ => "[redacted]".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(text: &str) -> String {
        shown(&reqwest::Url::parse(text).unwrap())
    }

    #[test]
    fn only_scheme_host_and_port_are_shown() {
        let token = "AbCdEf0123456789";
        let cases = [
            (
                format!("https://discord.com/api/webhooks/1234/{token}"),
                "https://discord.com/…",
            ),
            (
                format!("https://hooks.slack.com/services/T0/B0/{token}"),
                "https://hooks.slack.com/…",
            ),
            (
                format!("http://127.0.0.1:8080/?key={token}"),
                "http://127.0.0.1:8080/…",
            ),
            (
                format!("https://u:{token}@example.com"),
                "https://example.com",
            ),
            (
                format!("https://example.com/#{token}"),
                "https://example.com/…",
            ),
            ("https://example.com/".to_owned(), "https://example.com"),
            ("https://example.com:443/".to_owned(), "https://example.com"),
            ("http://[::1]:9000/x".to_owned(), "http://[::1]:9000/…"),
        ];
        for (url, expected) in cases {
            assert_eq!(of(&url), expected, "{url}");
            assert!(!of(&url).contains(token));
        }
        assert_eq!(shown_reference("literal-secret-0123"), "[redacted]");
        assert_eq!(
            shown_reference("https://discord.com/api/webhooks/1/x"),
            "https://discord.com/…"
        );
        assert_eq!(
            shown_reference("env:DISCORD_WEBHOOK_URL"),
            "env:DISCORD_WEBHOOK_URL"
        );
    }

    #[test]
    fn debug_shows_only_the_shown_form() {
        let url = TargetUrl::new(reqwest::Url::parse("https://h.example/secret-path").unwrap());
        assert_eq!(format!("{url:?}"), "https://h.example/…");
        assert_eq!(url.expose().path(), "/secret-path");
    }

    #[test]
    fn problems_name_the_reference_not_the_url() {
        let mut problems = Vec::new();
        for bad in [
            "ftp://host/secret-1",
            "not a url secret-3",
            "env:HOOKBOX_TEST_SURELY_UNSET_URL",
        ] {
            assert!(TargetUrl::resolve(bad, "at.url", &mut problems).is_none());
        }
        let text = problems.join("\n");
        assert!(!text.contains("secret-"), "{text}");
        assert!(text.contains("at.url ([redacted]): the scheme"), "{text}");
        assert!(
            text.contains("at.url (env:HOOKBOX_TEST_SURELY_UNSET_URL): environment variable"),
            "{text}"
        );
    }
}
