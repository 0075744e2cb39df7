//! Signed provider requests, as the providers send them, and the
//! committed signature vectors.

use std::net::SocketAddr;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::json;

pub const GITHUB_SECRET: &str = "test-secret";

/// A POST of `body` to `url` as the GitHub `push` delivery `delivery`,
/// signed with the test secret.
pub fn github_request(
    client: &reqwest::Client,
    url: &str,
    delivery: &str,
    body: &[u8],
) -> reqwest::RequestBuilder {
    github_event_request(client, url, "push", delivery, body)
}

/// [`github_request`] for an event of type `event` (`X-GitHub-Event`).
pub fn github_event_request(
    client: &reqwest::Client,
    url: &str,
    event: &str,
    delivery: &str,
    body: &[u8],
) -> reqwest::RequestBuilder {
    client
        .post(url)
        .header("content-type", "application/json")
        .header("x-github-event", event)
        .header("x-github-delivery", delivery)
        .header("x-hub-signature-256", github_signature(GITHUB_SECRET, body))
        .body(body.to_vec())
}

pub fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

pub fn github_signature(secret: &str, body: &[u8]) -> String {
    format!(
        "sha256={}",
        hex::encode(hmac_sha256(secret.as_bytes(), body))
    )
}

pub fn now_secs() -> i64 {
    hookbox::support::clock::now_secs()
}

/// A committed provider vector file, `tests/vectors/{kind}.json`.
pub fn vector_file(kind: &str) -> serde_json::Value {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/vectors/{kind}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// Moves the calling thread's clock to `at_ms` (unix milliseconds), and
/// with it the clock of a server spawned on this (current-thread) runtime:
/// for vectors signed at a fixed time. `shift_this_thread(0)` puts it back.
pub fn set_thread_clock_to(at_ms: i64) {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    hookbox::support::clock::shift_this_thread(at_ms - since.unwrap().as_millis() as i64);
}

/// POSTs a signed GitHub delivery to `/hooks/{source}` and returns the row id
/// of the 202.
pub async fn post_event(
    addr: SocketAddr,
    source: &str,
    delivery: &str,
    content_type: &str,
    body: &[u8],
) -> i64 {
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/hooks/{source}"))
        .header("content-type", content_type)
        .header("x-github-event", "push")
        .header("x-github-delivery", delivery)
        .header("x-hub-signature-256", github_signature(GITHUB_SECRET, body))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "posting {delivery}");
    json(r).await["id"].as_i64().unwrap()
}
