//! The broker servers of the `--broker` runs, started here on a free
//! loopback port with their data in a temp dir, as the integration
//! tests' harness (tests/it/helpers/brokers.rs) starts them: `nats-server`
//! with JetStream, `redis-server` with `appendonly yes` and `appendfsync
//! always`, RabbitMQ from its own start script with every path and port
//! in the temp dir (and its own `epmd`), Mosquitto. The bench owns each
//! process it starts and kills its whole process group on drop (PID 1
//! here reaps no orphans).

use anyhow::{Context, Result, bail};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;

use super::Kind;
use crate::server::{proc_stats, ticks_to_duration};

/// RabbitMQ's real start script: `/usr/sbin/rabbitmq-server` switches
/// user and drops the environment.
const RABBIT_SCRIPT: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

/// The user every broker requires (Redis: `default` with `requirepass`).
pub const USER: &str = "hookbox";

/// One running broker server.
pub struct Process {
    pub port: u16,
    pub password: String,
    dir: TempDir,
    children: Vec<Child>,
}

impl Process {
    /// Starts `kind` and waits until its port answers.
    pub async fn start(kind: Kind) -> Result<Process> {
        let dir = tempfile::Builder::new()
            .prefix("hookbox-bench-broker-")
            .tempdir()
            .context("creating the broker's temp dir")?;
        let mut p = Process {
            port: free_port()?,
            password: format!("pw-{:016x}", fastrand::u64(..)),
            dir,
            children: Vec::new(),
        };
        let d = p.dir.path().to_owned();
        let (port, pw) = (p.port, p.password.clone());
        let write = |name: &str, text: String| {
            std::fs::write(d.join(name), text).with_context(|| format!("writing {name}"))
        };
        let mut command = match kind {
            Kind::Nats => {
                write(
                    "nats.conf",
                    format!(
                        "listen: \"127.0.0.1:{port}\"\njetstream {{ store_dir: {:?} }}\n\
                         authorization {{ user: {USER}, password: \"{pw}\" }}\n",
                        d.join("js").display().to_string()
                    ),
                )?;
                let mut c = Command::new("nats-server");
                c.arg("-c").arg(d.join("nats.conf"));
                c
            }
            Kind::Redis => {
                write(
                    "redis.conf",
                    format!(
                        "port {port}\nbind 127.0.0.1\ndir {}\nappendonly yes\nappendfsync always\n\
                         save \"\"\nrequirepass {pw}\n",
                        d.display()
                    ),
                )?;
                let mut c = Command::new("redis-server");
                c.arg(d.join("redis.conf"));
                c
            }
            Kind::Mqtt => {
                // Anonymous on loopback, in memory: Mosquitto acknowledges a
                // publish before any disk write either way.
                write(
                    "mosquitto.conf",
                    format!(
                        "listener {port} 127.0.0.1\nallow_anonymous true\n\
                         max_queued_messages 0\nlog_dest stderr\nuser {}\n",
                        whoami()?
                    ),
                )?;
                let mut c = Command::new("mosquitto");
                c.arg("-c").arg(d.join("mosquitto.conf"));
                c
            }
            Kind::Amqp => {
                let (dist, epmd) = (free_port()?, free_port()?);
                write("env.conf", String::new())?;
                write("enabled_plugins", "[].\n".to_owned())?;
                write(
                    "rabbitmq.conf",
                    format!(
                        "listeners.tcp.1 = 127.0.0.1:{port}\nloopback_users = none\n\
                         default_user = {USER}\ndefault_pass = {pw}\n"
                    ),
                )?;
                let mut e = Command::new("epmd");
                e.args(["-port", &epmd.to_string(), "-address", "127.0.0.1"]);
                p.spawn(e, "epmd.log")?;
                let mut c = Command::new(RABBIT_SCRIPT);
                c.env("HOME", &d)
                    .env(
                        "RABBITMQ_NODENAME",
                        format!("hookbox-bench-{port}@localhost"),
                    )
                    .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
                    .env("RABBITMQ_NODE_PORT", port.to_string())
                    .env("RABBITMQ_DIST_PORT", dist.to_string())
                    .env("ERL_EPMD_PORT", epmd.to_string())
                    .env("RABBITMQ_MNESIA_BASE", d.join("mnesia"))
                    .env("RABBITMQ_LOG_BASE", d.join("log"))
                    .env("RABBITMQ_CONFIG_FILE", d.join("rabbitmq.conf"))
                    .env("RABBITMQ_ENABLED_PLUGINS_FILE", d.join("enabled_plugins"))
                    .env("RABBITMQ_PID_FILE", d.join("rabbit.pid"))
                    .env("RABBITMQ_CONF_ENV_FILE", d.join("env.conf"))
                    .env(
                        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                        "-kernel inet_dist_use_interface {127,0,0,1}",
                    );
                c
            }
        };
        command.current_dir(&d);
        p.spawn(command, "server.log")?;
        p.wait_ready(kind).await?;
        Ok(p)
    }

    fn spawn(&mut self, mut command: Command, log: &str) -> Result<()> {
        let log = std::fs::File::create(self.dir.path().join(log)).context("creating a log")?;
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("cloning a log handle")?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {:?}", command.get_program()))?;
        self.children.push(child);
        Ok(())
    }

    async fn wait_ready(&mut self, kind: Kind) -> Result<()> {
        // RabbitMQ boots an Erlang VM: 8-18 s here, more when busy.
        let patience = match kind {
            Kind::Amqp => Duration::from_secs(90),
            _ => Duration::from_secs(15),
        };
        let deadline = Instant::now() + patience;
        loop {
            if let Some(child) = self.children.last_mut()
                && let Some(status) = child.try_wait().context("polling the broker")?
            {
                bail!("{kind:?} exited at start ({status}):\n{}", self.log());
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "{kind:?} did not answer within {patience:?}:\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// CPU time (user + system) the live processes of the broker's process
    /// groups have used: RabbitMQ's script, its Erlang VM and helpers.
    pub fn cpu(&self, ticks_per_sec: f64) -> Result<Duration> {
        let groups: Vec<u32> = self.children.iter().map(Child::id).collect();
        let ticks = proc_stats()?
            .filter(|p| groups.contains(&p.group))
            .map(|p| p.ticks)
            .sum();
        Ok(ticks_to_duration(ticks, ticks_per_sec))
    }

    /// The server's log, for a failure message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // The whole group: RabbitMQ's script, its Erlang VM and helpers.
        for child in self.children.iter_mut().rev() {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .stderr(Stdio::null())
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn free_port() -> Result<u16> {
    let l = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).context("a free port")?;
    Ok(l.local_addr().context("a free port")?.port())
}

/// Mosquitto run as root switches to its own user unless told this one.
fn whoami() -> Result<String> {
    let out = Command::new("id")
        .arg("-un")
        .output()
        .context("running id")?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}
