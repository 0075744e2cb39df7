//! TestApp: the production `App` on 127.0.0.1:0 with a database in a temp
//! dir, started and stopped in this process.

use std::net::SocketAddr;
use std::path::PathBuf;

use tempfile::TempDir;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use hookbox::config;
use hookbox::ingress::receive::registry::PROVIDERS;
use hookbox::service::app::App;

use super::signing::github_request;

pub struct TestApp {
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    /// The bearer token the admin listener requires ([`ADMIN_TOKEN`]).
    pub admin_token: String,
    pub client: reqwest::Client,
    pub db_path: PathBuf,
    pub dir: TempDir,
    shutdown: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

/// A GitHub source with a literal secret, for most tests.
pub const GITHUB_SOURCE: &str = r#"
[[sources]]
name = "github"
kind = "github"
secrets = ["test-secret"]
"#;

/// The admin token every TestApp is configured with.
pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

impl TestApp {
    /// Starts hookbox with `sources` (TOML `[[sources]]` tables) and any
    /// extra `[server]` lines.
    pub async fn spawn(sources: &str) -> TestApp {
        Self::spawn_with(sources, "").await
    }

    pub async fn spawn_with(sources: &str, server_extra: &str) -> TestApp {
        let dir = tempfile::tempdir().unwrap();
        Self::spawn_in(dir, sources, server_extra).await
    }

    /// Starts hookbox on a database in `dir` (which may already hold one).
    pub async fn spawn_in(dir: TempDir, sources: &str, server_extra: &str) -> TestApp {
        let db_path = dir.path().join("hookbox.db");
        Self::spawn_at(dir, db_path, sources, server_extra).await
    }

    /// Starts hookbox on the database at `db_path`, which may live outside
    /// `dir` (say on a small tmpfs); `dir` is kept as long as the app.
    pub async fn spawn_at(
        dir: TempDir,
        db_path: PathBuf,
        sources: &str,
        server_extra: &str,
    ) -> TestApp {
        if std::env::var_os("TEST_LOG").is_some() {
            hookbox::telemetry::init(hookbox::telemetry::LogFormat::Text);
        }
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\ndatabase = {:?}\n{server_extra}\n[admin]\ntoken = \"{ADMIN_TOKEN}\"\n{sources}",
            db_path.display().to_string()
        );
        let config = config::from_toml(&text, "test".into(), &PROVIDERS).unwrap();
        let app = App::build(config).await.unwrap();
        let addr = app.public_addr();
        let admin_addr = app.admin_addr();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(app.run(shutdown.clone()));
        TestApp {
            addr,
            admin_addr,
            admin_token: ADMIN_TOKEN.to_owned(),
            client: reqwest::Client::new(),
            db_path,
            dir,
            shutdown,
            task,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{}", self.admin_addr, path)
    }

    /// GETs `path` on the admin listener with the token.
    pub async fn admin_get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(self.admin_url(path))
            .bearer_auth(&self.admin_token)
            .send()
            .await
            .unwrap()
    }

    /// POSTs `body` as JSON to `path` on the admin listener with the token.
    pub async fn admin_post(&self, path: &str, body: serde_json::Value) -> reqwest::Response {
        self.client
            .post(self.admin_url(path))
            .bearer_auth(&self.admin_token)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// Stops the server the way SIGTERM does and waits for it.
    pub async fn shutdown(self) -> TempDir {
        self.shutdown.cancel();
        self.task.await.unwrap().unwrap();
        self.dir
    }

    /// A direct connection to the database, for assertions.
    pub fn db(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(&self.db_path).unwrap()
    }

    pub fn count(&self, sql: &str) -> i64 {
        self.db().query_row(sql, [], |r| r.get(0)).unwrap()
    }

    /// POSTs a GitHub delivery signed with the test secret.
    pub async fn post_github(&self, delivery: &str, body: &[u8]) -> reqwest::Response {
        github_request(&self.client, &self.url("/hooks/github"), delivery, body)
            .send()
            .await
            .unwrap()
    }
}
