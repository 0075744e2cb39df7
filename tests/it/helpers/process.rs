//! The real binary as a child process: `hookbox()` with nothing from the
//! test environment that could change what it does, `ChildServer` for
//! `hookbox serve`, and free loopback ports to give it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::app::ADMIN_TOKEN;

/// What the test environment could hold that changes what the binary does:
/// a config picked from the environment, a default source enabled by a
/// secret, a log filter, systemd's hand-over. [`hookbox`] clears them all;
/// a test that wants one sets it again.
pub const CLEARED_ENV: [&str; 10] = [
    "HOOKBOX_CONFIG",
    "RUST_LOG",
    "GITHUB_WEBHOOK_SECRET",
    "STRIPE_WEBHOOK_SECRET",
    "SHOPIFY_WEBHOOK_SECRET",
    "STANDARD_WEBHOOK_SECRET",
    "STATE_DIRECTORY",
    "CREDENTIALS_DIRECTORY",
    "NOTIFY_SOCKET",
    "WATCHDOG_PID",
];

/// Clears [`CLEARED_ENV`] from `cmd`, for a command that starts the binary
/// in turn (`systemd-socket-activate`).
pub fn clear_env(cmd: &mut Command) -> &mut Command {
    for var in CLEARED_ENV {
        cmd.env_remove(var);
    }
    cmd
}

/// The binary, with nothing from the test environment that could enable
/// a default source or pick a config.
pub fn hookbox() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hookbox"));
    clear_env(&mut cmd);
    cmd
}

/// [`hookbox`] with `--config` pointing at a file that names `db` as the
/// database.
pub fn cli(db: &Path) -> Command {
    let config = db.with_file_name("cli.toml");
    std::fs::write(
        &config,
        format!("[server]\ndatabase = {:?}\n", db.display().to_string()),
    )
    .unwrap();
    let mut cmd = hookbox();
    cmd.arg("--config").arg(config);
    cmd
}

/// Runs a prepared command off the async runtime, so load keeps flowing.
pub async fn run(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// stdout, then stderr, as text.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

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
        dir: &Path,
        database: &Path,
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
        dir: &Path,
        database: &Path,
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
        dir: &Path,
        database: &Path,
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
        let mut command = hookbox();
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

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// `GET /metrics` from the admin listener, as text.
    pub async fn metrics(&self) -> String {
        reqwest::Client::new()
            .get(self.admin_url("/metrics"))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
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

    /// SIGSTOP, returning once every thread of the process has stopped:
    /// from then on its files stay as they are until [`ChildServer::thaw`]
    /// or a kill.
    pub fn freeze(&self) {
        self.signal(nix::sys::signal::Signal::SIGSTOP);
        let tasks = format!("/proc/{}/task", self.child.id());
        let stopped = || {
            std::fs::read_dir(&tasks).unwrap().all(|task| {
                let stat = std::fs::read_to_string(task.unwrap().path().join("stat"));
                // `pid (comm) S ...`: the state follows the name.
                stat.is_ok_and(|s| {
                    s.rsplit_once(") ")
                        .is_some_and(|(_, rest)| rest.starts_with(['T', 't']))
                })
            })
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !stopped() {
            assert!(
                std::time::Instant::now() < deadline,
                "hookbox did not stop within 5 s of SIGSTOP"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// SIGCONT: a frozen process goes on.
    pub fn thaw(&self) {
        self.signal(nix::sys::signal::Signal::SIGCONT);
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
    // Never the same port twice in this process: a server's `listen` and
    // `admin_listen` are two draws, which hookbox refuses equal (one start
    // in 12,000 drew the same port twice), and tests run side by side.
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = 20_000 + fastrand::u16(..12_000);
        if !GIVEN.lock().unwrap().insert(port) {
            continue;
        }
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            return listener.local_addr().unwrap();
        }
    }
}

/// The port of a [`free_addr`].
pub fn free_port() -> u16 {
    free_addr().port()
}
