//! Real message brokers on loopback for the broker destination tests:
//! `nats-server` (JetStream), `redis-server`, RabbitMQ and Mosquitto from
//! Debian's packages, each on free ports with its own data directory in a
//! temp dir. [`Broker::start`] waits until the server answers; the
//! harness owns every process it starts (PID 1 here reaps no orphans) and
//! kills them on drop. [`Broker::kill9`] and [`Broker::restart`] are the
//! outage: SIGKILL, then a start on the same port and data directory.
//!
//! A missing server is [`super::debian_tools`]' business: the test skips
//! with a line, or fails under `CI`.

use std::net::TcpStream;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tempfile::TempDir;

use super::free_port;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BrokerKind {
    Nats,
    Redis,
    Rabbit,
    Mosquitto,
}

impl BrokerKind {
    /// The programs it needs and the Debian package that has them.
    fn tools(self) -> (&'static [&'static str], &'static str) {
        match self {
            BrokerKind::Nats => (&["nats-server"], "nats-server"),
            BrokerKind::Redis => (&["redis-server"], "redis-server"),
            BrokerKind::Rabbit => (&["epmd"], "rabbitmq-server"),
            BrokerKind::Mosquitto => (&["mosquitto", "mosquitto_passwd"], "mosquitto"),
        }
    }

    /// How long a start may take: RabbitMQ boots an Erlang VM (8-18 s
    /// here, more on a loaded machine).
    fn patience(self) -> Duration {
        match self {
            BrokerKind::Rabbit => Duration::from_secs(60),
            _ => Duration::from_secs(15),
        }
    }
}

/// RabbitMQ's real start script: `/usr/sbin/rabbitmq-server` switches
/// user and drops the environment.
const RABBIT_SCRIPT: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

/// The user and password every broker but NATS-without-auth requires.
pub const BROKER_USER: &str = "hookbox";

/// One running broker and its data directory.
pub struct Broker {
    pub kind: BrokerKind,
    /// The client port on 127.0.0.1.
    pub port: u16,
    /// The password clients must give ([`BROKER_USER`]'s).
    pub password: String,
    dir: TempDir,
    child: Option<Child>,
    /// RabbitMQ's own `epmd`, on a private port, and its distribution port.
    epmd: Option<Child>,
    rabbit_ports: Option<(u16, u16)>,
    /// The TLS listener's port, when started with [`Broker::start_tls`].
    pub tls_port: Option<u16>,
    starts: usize,
}

impl Broker {
    /// Starts `kind` with a password; `None` (after a line saying so)
    /// when its server is not installed here.
    pub async fn start(kind: BrokerKind) -> Option<Broker> {
        Self::start_with(kind, false).await
    }

    /// [`Broker::start`] with a TLS listener too (on [`Broker::tls_port`];
    /// for NATS the client port itself speaks TLS), its certificate from a
    /// test CA in [`Broker::ca_file`], for `localhost`.
    pub async fn start_tls(kind: BrokerKind) -> Option<Broker> {
        Self::start_with(kind, true).await
    }

    async fn start_with(kind: BrokerKind, tls: bool) -> Option<Broker> {
        let (programs, package) = kind.tools();
        let found = if kind == BrokerKind::Rabbit {
            Path::new(RABBIT_SCRIPT).exists() && super::on_path("epmd")
        } else {
            programs.iter().all(|p| super::on_path(p))
        };
        let tool = format!("{} ({package})", programs.join(", "));
        if !super::outside_tool(&tool, found, &format!("apt-get install -y {package}")) {
            return None;
        }
        let mut broker = Broker {
            kind,
            port: free_port(),
            password: format!("pw-{:016x}", fastrand::u64(..)),
            dir: tempfile::tempdir().unwrap(),
            child: None,
            epmd: None,
            rabbit_ports: None,
            tls_port: tls.then(free_port),
            starts: 0,
        };
        if tls {
            write_certificates(broker.dir.path());
        }
        broker.prepare();
        broker.launch().await;
        Some(broker)
    }

    /// The URL hookbox is given: with the password.
    pub fn url(&self) -> String {
        self.url_with(&self.password)
    }

    /// The URL of the TLS listener, by the name its certificate has.
    pub fn tls_url(&self) -> String {
        let (password, port) = (&self.password, self.tls_port.expect("started with TLS"));
        match self.kind {
            BrokerKind::Nats => format!(
                "nats+tls://{BROKER_USER}:{password}@localhost:{}",
                self.port
            ),
            BrokerKind::Redis => format!("rediss://default:{password}@localhost:{port}"),
            BrokerKind::Rabbit => format!("amqps://{BROKER_USER}:{password}@localhost:{port}/%2f"),
            BrokerKind::Mosquitto => format!("mqtts://{BROKER_USER}:{password}@localhost:{port}"),
        }
    }

    /// The test CA that signed the TLS listener's certificate (PEM).
    pub fn ca_file(&self) -> std::path::PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The URL with another password (an auth failure).
    pub fn url_with(&self, password: &str) -> String {
        let port = self.port;
        match self.kind {
            BrokerKind::Nats => format!("nats://{BROKER_USER}:{password}@127.0.0.1:{port}"),
            // The default user with `requirepass`: Redis 7.0 refuses to
            // load the scripted adds of its append-only file when the
            // default user is off (docs/src/destinations/redis.md).
            BrokerKind::Redis => format!("redis://default:{password}@127.0.0.1:{port}"),
            BrokerKind::Rabbit => format!("amqp://{BROKER_USER}:{password}@127.0.0.1:{port}/%2f"),
            BrokerKind::Mosquitto => format!("mqtt://{BROKER_USER}:{password}@127.0.0.1:{port}"),
        }
    }

    /// Writes the config files a start reads (once: restarts reuse them).
    fn prepare(&mut self) {
        let dir = self.dir.path().to_owned();
        let (port, password) = (self.port, self.password.clone());
        match self.kind {
            BrokerKind::Nats => {
                std::fs::write(
                    dir.join("nats.conf"),
                    format!(
                        "listen: \"127.0.0.1:{port}\"\njetstream {{ store_dir: {:?} }}\n\
                         authorization {{ user: {BROKER_USER}, password: \"{password}\" }}\n{}",
                        dir.join("js").display().to_string(),
                        if self.tls_port.is_some() {
                            format!(
                                "tls {{ cert_file: {:?}, key_file: {:?} }}\n",
                                dir.join("cert.pem").display().to_string(),
                                dir.join("key.pem").display().to_string()
                            )
                        } else {
                            String::new()
                        }
                    ),
                )
                .unwrap();
            }
            BrokerKind::Redis => {
                std::fs::write(
                    dir.join("redis.conf"),
                    format!(
                        "port {port}\nbind 127.0.0.1\ndir {}\nappendonly yes\nappendfsync always\n\
                         save \"\"\nrequirepass {password}\n{}",
                        dir.display(),
                        match self.tls_port {
                            Some(tls) => format!(
                                "tls-port {tls}\ntls-cert-file {}\ntls-key-file {}\n\
                                 tls-ca-cert-file {}\ntls-auth-clients no\n",
                                dir.join("cert.pem").display(),
                                dir.join("key.pem").display(),
                                dir.join("ca.pem").display()
                            ),
                            None => String::new(),
                        }
                    ),
                )
                .unwrap();
            }
            BrokerKind::Rabbit => {
                let (dist, epmd) = (free_port(), free_port());
                self.rabbit_ports = Some((dist, epmd));
                std::fs::write(dir.join("env.conf"), "").unwrap();
                std::fs::write(dir.join("enabled_plugins"), "[].\n").unwrap();
                std::fs::write(
                    dir.join("rabbitmq.conf"),
                    format!(
                        "listeners.tcp.1 = 127.0.0.1:{port}\nloopback_users = none\n\
                         default_user = {BROKER_USER}\ndefault_pass = {password}\n{}",
                        match self.tls_port {
                            Some(tls) => format!(
                                "listeners.ssl.default = 127.0.0.1:{tls}\n\
                                 ssl_options.cacertfile = {}\nssl_options.certfile = {}\n\
                                 ssl_options.keyfile = {}\nssl_options.verify = verify_none\n\
                                 ssl_options.fail_if_no_peer_cert = false\n",
                                dir.join("ca.pem").display(),
                                dir.join("cert.pem").display(),
                                dir.join("key.pem").display()
                            ),
                            None => String::new(),
                        }
                    ),
                )
                .unwrap();
            }
            BrokerKind::Mosquitto => {
                let passwords = dir.join("passwords");
                let made = Command::new("mosquitto_passwd")
                    .arg("-b")
                    .arg("-c")
                    .arg(&passwords)
                    .arg(BROKER_USER)
                    .arg(&password)
                    .output()
                    .unwrap();
                assert!(made.status.success(), "mosquitto_passwd: {made:?}");
                // The user may use `hooks/#` only: a publish elsewhere is
                // refused (a PUBACK with "not authorized").
                let acl = dir.join("acl");
                std::fs::write(
                    &acl,
                    format!("user {BROKER_USER}\ntopic readwrite hooks/#\n"),
                )
                .unwrap();
                let whoami = Command::new("id").arg("-un").output().unwrap();
                let user = String::from_utf8(whoami.stdout).unwrap().trim().to_owned();
                // Run as root, Mosquitto switches to its own user and then
                // cannot write its data here: it stays this user.
                std::fs::write(
                    dir.join("mosquitto.conf"),
                    format!(
                        "listener {port} 127.0.0.1\nallow_anonymous false\npassword_file {}\nacl_file {}\n\
                         persistence true\npersistence_location {}/\nautosave_interval 1\n\
                         autosave_on_changes true\nuser {user}\nlog_dest stderr\n{}",
                        passwords.display(),
                        acl.display(),
                        dir.display(),
                        match self.tls_port {
                            Some(tls) => format!(
                                "listener {tls} 127.0.0.1\ncertfile {}\nkeyfile {}\n",
                                dir.join("cert.pem").display(),
                                dir.join("key.pem").display()
                            ),
                            None => String::new(),
                        }
                    ),
                )
                .unwrap();
            }
        }
    }

    /// Starts the server (again) and waits until its port answers.
    async fn launch(&mut self) {
        self.starts += 1;
        let dir = self.dir.path().to_owned();
        let log = std::fs::File::create(dir.join(format!("server-{}.log", self.starts))).unwrap();
        let mut command = match self.kind {
            BrokerKind::Nats => {
                let mut c = Command::new("nats-server");
                c.arg("-c").arg(dir.join("nats.conf"));
                c
            }
            BrokerKind::Redis => {
                let mut c = Command::new("redis-server");
                c.arg(dir.join("redis.conf"));
                c
            }
            BrokerKind::Mosquitto => {
                let mut c = Command::new("mosquitto");
                c.arg("-c").arg(dir.join("mosquitto.conf"));
                c
            }
            BrokerKind::Rabbit => self.rabbit_command(&dir),
        };
        let child = command
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {:?}: {e}", self.kind));
        self.child = Some(child);
        self.wait_ready().await;
    }

    /// RabbitMQ with everything in the temp dir: node name, ports, Mnesia,
    /// logs, config, plugins, pid file, `HOME` (the Erlang cookie), and its
    /// own `epmd` (started once, kept across restarts).
    fn rabbit_command(&mut self, dir: &Path) -> Command {
        let (dist, epmd) = self.rabbit_ports.expect("prepared");
        if self.epmd.is_none() {
            let child = Command::new("epmd")
                .arg("-port")
                .arg(epmd.to_string())
                .arg("-address")
                .arg("127.0.0.1")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
                .expect("starting epmd");
            self.epmd = Some(child);
        }
        let mut c = Command::new(RABBIT_SCRIPT);
        c.env("HOME", dir)
            .env(
                "RABBITMQ_NODENAME",
                format!("hookbox-test-{}@localhost", self.port),
            )
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", dist.to_string())
            .env("ERL_EPMD_PORT", epmd.to_string())
            .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", dir.join("log"))
            .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq.conf"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
            .env("RABBITMQ_PID_FILE", dir.join("rabbit.pid"))
            .env("RABBITMQ_CONF_ENV_FILE", dir.join("env.conf"))
            .env(
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                "-kernel inet_dist_use_interface {127,0,0,1}",
            );
        c
    }

    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + self.kind.patience();
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!(
                    "{:?} exited at start ({status}):\n{}",
                    self.kind,
                    self.log()
                );
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{:?} did not answer within {:?}:\n{}",
                self.kind,
                self.kind.patience(),
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL to the server's whole process group (RabbitMQ's script,
    /// Erlang VM and helpers alike), and reap it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and data directory.
    pub async fn restart(&mut self) {
        self.kill9();
        self.launch().await;
    }

    /// What the server wrote, every start of it.
    pub fn log(&self) -> String {
        (1..=self.starts)
            .map(|n| {
                std::fs::read_to_string(self.dir.path().join(format!("server-{n}.log")))
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("\n--- restart ---\n")
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill9();
        if let Some(mut epmd) = self.epmd.take() {
            let _ = killpg(Pid::from_raw(epmd.id() as i32), Signal::SIGKILL);
            let _ = epmd.wait();
        }
    }
}

/// A test CA (`ca.pem`) and a certificate it signed for `localhost` and
/// 127.0.0.1 (`cert.pem`, the chain; `key.pem`), in `dir`.
fn write_certificates(dir: &Path) {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair, KeyUsagePurpose,
    };
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "hookbox broker test CA");
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let mut params =
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("cert.pem"), format!("{}{}", cert.pem(), ca.pem())).unwrap();
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
}

/// A TCP forwarder on loopback to `target` that passes the first
/// `cut_after` bytes the client sends after it has seen `marker` (from
/// the client), then closes both sides before anything more from the
/// server reaches the client: the broker got the publish, the client
/// never hears the reply. Every connection after the cut one passes
/// through untouched.
pub struct CutProxy {
    pub port: u16,
    cuts: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl CutProxy {
    /// Cuts the first connection that sends `marker`, once the bytes up
    /// to and including the marker's line were forwarded and `settle`
    /// has passed (long enough for the server to act on them).
    pub async fn start(target: u16, marker: &'static [u8], settle: Duration) -> CutProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cuts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = cuts.clone();
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let counted = counted.clone();
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await
                    else {
                        return;
                    };
                    forward(client, server, marker, settle, counted).await;
                });
            }
        });
        CutProxy { port, cuts }
    }

    /// How many connections were cut.
    pub fn cuts(&self) -> usize {
        self.cuts.load(std::sync::atomic::Ordering::SeqCst)
    }
}

async fn forward(
    client: tokio::net::TcpStream,
    server: tokio::net::TcpStream,
    marker: &'static [u8],
    settle: Duration,
    cuts: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let (cut_tx, mut cut_rx) = tokio::sync::watch::channel(false);
    // Server to client, until the cut.
    let down = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            tokio::select! {
                biased;
                _ = cut_rx.changed() => return,
                n = server_read.read(&mut buf) => match n {
                    Ok(0) | Err(_) => return,
                    Ok(n) => if client_write.write_all(&buf[..n]).await.is_err() { return },
                },
            }
        }
    });
    let mut seen: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut armed = cuts.load(std::sync::atomic::Ordering::SeqCst) == 0;
    loop {
        let n = match client_read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if armed {
            seen.extend_from_slice(&buf[..n]);
            if seen.windows(marker.len()).any(|w| w == marker)
                && cuts
                    .compare_exchange(
                        0,
                        1,
                        std::sync::atomic::Ordering::SeqCst,
                        std::sync::atomic::Ordering::SeqCst,
                    )
                    .is_ok()
            {
                // Stop the replies first, then hand the publish over,
                // with whatever of it is still on its way, for `settle`.
                let _ = cut_tx.send(true);
                let _ = server_write.write_all(&buf[..n]).await;
                let until = tokio::time::Instant::now() + settle;
                while let Ok(Ok(n)) =
                    tokio::time::timeout_at(until, client_read.read(&mut buf)).await
                {
                    if n == 0 || server_write.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
                tokio::time::sleep_until(until).await;
                break;
            }
            armed = cuts.load(std::sync::atomic::Ordering::SeqCst) == 0;
        }
        if server_write.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    down.abort();
}
