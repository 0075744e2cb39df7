//! TestApp: the production `App` on 127.0.0.1:0 with a database in a temp
//! dir, plus signing helpers for the providers.

use std::net::SocketAddr;
use std::path::PathBuf;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use tempfile::TempDir;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use hookbox::app::App;
use hookbox::config;

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

pub const GITHUB_SECRET: &str = "test-secret";

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
    hookbox::clock::now_secs()
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
    hookbox::clock::shift_this_thread(at_ms - since.unwrap().as_millis() as i64);
}

/// The JSON body of a response.
pub async fn json(response: reqwest::Response) -> serde_json::Value {
    response.json().await.unwrap()
}

impl TestApp {
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
        let config = config::from_toml(&text, "test".into()).unwrap();
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
}

// ------------------------------------------------------- child process ---

/// `hookbox serve` as a child process (the real binary) on the database at
/// `database`, with `sources` and any extra `[server]` lines. Killed on
/// drop so a failed assertion leaves nothing running; its output goes to
/// a file, whose tail is printed when the test fails (or with `TEST_LOG=1`).
pub struct ChildServer {
    pub child: std::process::Child,
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    /// stdout and stderr of the process.
    pub log: PathBuf,
}

impl ChildServer {
    /// Starts the binary and waits for `/readyz` on the admin listener
    /// (plain HTTP even when the public one speaks TLS; both are bound
    /// before either serves). Ports are picked free and let go, so a
    /// start that loses one to another socket is tried again.
    /// The config is written to `dir`, the log to `dir/hookbox-{run}.log`.
    pub async fn spawn_ready(
        dir: &std::path::Path,
        database: &std::path::Path,
        sources: &str,
        server_extra: &str,
        run: usize,
    ) -> ChildServer {
        Self::spawn_ready_with(dir, database, sources, server_extra, run, &[], |_| {}).await
    }

    /// [`ChildServer::spawn_ready`] with `env` set in the process's
    /// environment, telling `announce` the public address before the
    /// process starts (a fake provider that calls hookbox back must know it
    /// before hookbox's start-up catch-up asks it).
    pub async fn spawn_ready_with(
        dir: &std::path::Path,
        database: &std::path::Path,
        sources: &str,
        server_extra: &str,
        run: usize,
        env: &[(&str, &str)],
        announce: impl Fn(SocketAddr),
    ) -> ChildServer {
        for attempt in 0..4 {
            let addr = free_addr();
            announce(addr);
            let mut server =
                ChildServer::start(addr, dir, database, sources, server_extra, run, env);
            match server.wait_ready().await {
                Ok(()) => return server,
                Err(exit) if attempt < 3 && server.output().contains("binding the") => {
                    eprintln!("hookbox could not bind ({exit}); trying other ports");
                }
                Err(exit) => panic!("hookbox exited before it was ready: {exit}"),
            }
        }
        unreachable!()
    }

    fn start(
        addr: SocketAddr,
        dir: &std::path::Path,
        database: &std::path::Path,
        sources: &str,
        server_extra: &str,
        run: usize,
        env: &[(&str, &str)],
    ) -> ChildServer {
        let admin_addr = free_addr();
        let config = dir.join("hookbox.toml");
        std::fs::write(
            &config,
            format!(
                "[server]\nlisten = \"{addr}\"\nadmin_listen = \"{admin_addr}\"\ndatabase = {:?}\n{server_extra}\n\
                 [admin]\ntoken = \"{ADMIN_TOKEN}\"\n{sources}",
                database.display().to_string()
            ),
        )
        .unwrap();
        let log = dir.join(format!("hookbox-{run}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_hookbox"));
        for var in [
            "HOOKBOX_CONFIG",
            "RUST_LOG",
            "GITHUB_WEBHOOK_SECRET",
            "STRIPE_WEBHOOK_SECRET",
            "SHOPIFY_WEBHOOK_SECRET",
            "STANDARD_WEBHOOK_SECRET",
        ] {
            command.env_remove(var);
        }
        command.envs(env.iter().copied());
        let child = command
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("starting the hookbox binary");
        ChildServer {
            child,
            addr,
            admin_addr,
            log,
        }
    }

    /// `Err` when the process exited instead of getting ready.
    async fn wait_ready(&mut self) -> Result<(), String> {
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(2))
            .build()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Err(format!("{status:?}"));
            }
            let ready = client
                .get(format!("http://{}/readyz", self.admin_addr))
                .send()
                .await;
            if ready.is_ok_and(|r| r.status() == 200) {
                return Ok(());
            }
            assert!(
                std::time::Instant::now() < deadline,
                "hookbox was not ready within 15 s"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
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
        reqwest::Client::new()
            .get(self.admin_url(path))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
    }

    /// POSTs `body` as JSON to `path` on the admin listener with the token.
    pub async fn admin_post(&self, path: &str, body: serde_json::Value) -> reqwest::Response {
        reqwest::Client::new()
            .post(self.admin_url(path))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL (what `Child::kill` sends on Unix), then reap.
    pub fn kill9(&mut self) -> std::process::ExitStatus {
        self.child.kill().unwrap();
        self.child.wait().unwrap()
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, signal).unwrap();
    }

    /// SIGTERM, then waits up to `within` for the exit.
    pub async fn terminate(&mut self, within: std::time::Duration) -> std::process::ExitStatus {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "hookbox did not exit within {within:?} of SIGTERM"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Everything the process wrote so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines the process wrote.
    pub fn log_tail(&self, n: usize) -> String {
        let output = self.output();
        let lines: Vec<&str> = output.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        if self.running() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() || std::env::var_os("TEST_LOG").is_some() {
            eprintln!("--- {} ---\n{}", self.log.display(), self.log_tail(80));
        }
    }
}

/// A loopback address nobody is listening on, picked at random below
/// Linux's ephemeral range (32768-60999) and checked by binding it. A port
/// the kernel handed out for `:0` (as `free_addr` once did) could be handed
/// out again, to another test's listener or client socket, before the
/// server meant to take it binds; the kernel never hands out these.
pub fn free_addr() -> SocketAddr {
    loop {
        let port = 20_000 + fastrand::u16(..12_000);
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            return listener.local_addr().unwrap();
        }
    }
}
