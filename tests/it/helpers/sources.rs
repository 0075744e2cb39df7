//! `[[sources]]` tables for tests that deliver: a GitHub source with a
//! destination and quick retries, and bodies carrying its order key.

use super::servers::SIGNING_SECRET;
use super::signing::GITHUB_SECRET;

/// A `github` source named `name` delivering to `destination` (the `url`
/// and `signing_secret` lines, or a `command` line), keyed on the
/// repository, with quick retries.
pub fn deliver_source(name: &str, destination: &str, timeout: &str, max_attempts: u32) -> String {
    deliver_source_backoff(name, destination, timeout, max_attempts, "50ms", "400ms")
}

/// [`deliver_source`] with its own backoff.
pub fn deliver_source_backoff(
    name: &str,
    destination: &str,
    timeout: &str,
    max_attempts: u32,
    backoff_base: &str,
    backoff_cap: &str,
) -> String {
    format!(
        r#"
[[sources]]
name = "{name}"
kind = "github"
secrets = ["{GITHUB_SECRET}"]
order_key = ["/repository/full_name"]
[sources.deliver]
{destination}
timeout = "{timeout}"
max_attempts = {max_attempts}
backoff_base = "{backoff_base}"
backoff_cap = "{backoff_cap}"
"#
    )
}

/// The destination lines of a url source.
pub fn url_destination(url: &str) -> String {
    format!("url = \"{url}\"\nsigning_secret = \"{SIGNING_SECRET}\"")
}

/// [`url_destination`] without the circuit breaker, for tests of one
/// delivery's own retries: its Retry-After and backoff alone decide, and
/// a long outage never pauses the destination.
pub fn url_destination_unguarded(url: &str) -> String {
    format!("{}\nbreaker_failures = 0", url_destination(url))
}

/// A JSON body whose order key is `repo`.
pub fn repo_body(repo: &str, n: usize) -> Vec<u8> {
    format!(r#"{{"repository":{{"full_name":"{repo}"}},"n":{n}}}"#).into_bytes()
}
