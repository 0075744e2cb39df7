//! What the integration tests share, by concern:
//!
//! - [`app`]: `TestApp`, the production `App` in this process on
//!   127.0.0.1:0 with a database in a temp dir;
//! - [`brokers`]: real NATS, Redis, RabbitMQ and Mosquitto servers on
//!   loopback, killed and restarted at will, and a proxy that cuts a
//!   connection between a publish and its reply;
//! - [`process`]: the real binary as a child process (`ChildServer`, the
//!   `hookbox()` command with a clean environment, free ports);
//! - [`servers`]: loopback HTTP servers: the recording `Downstream` that
//!   hookbox delivers to, and the plumbing the provider fakes share;
//! - [`signing`]: signed provider requests and committed vectors;
//! - [`sources`]: `[[sources]]` tables that deliver somewhere;
//! - [`rows`]: reading events and attempts back from the database;
//! - [`tools`]: outside tools a test needs, skipped without them but
//!   required under `CI`.
//!
//! Everything is re-exported here: `use crate::helpers::*`.

use std::time::{Duration, Instant};

mod app;
mod brokers;
mod process;
mod rows;
mod servers;
mod signing;
mod sources;
mod tools;

pub use app::*;
pub use brokers::*;
pub use process::*;
pub use rows::*;
pub use servers::*;
pub use signing::*;
pub use sources::*;
pub use tools::*;

/// Logs in to the dashboard whose login page is `login_url` (an in-process
/// `TestApp`'s or a child server's `admin_url("/login")`) with the
/// admin token; the session cookie, ready for a `cookie` header.
pub async fn dashboard_cookie(login_url: String) -> String {
    let r = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(login_url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={ADMIN_TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303, "logging in to the dashboard");
    let set = r.headers()["set-cookie"].to_str().unwrap();
    set.split(';').next().unwrap().to_owned()
}

/// How long any "eventually" in these tests may take.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// Polls `probe` every 20 ms until it yields, for at most [`PATIENCE`].
pub async fn eventually<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "gave up waiting for {what} after {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The JSON body of a response.
pub async fn json(response: reqwest::Response) -> serde_json::Value {
    response.json().await.unwrap()
}
