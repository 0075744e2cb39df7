//! `deliver.command`: run the user's program once per attempt.
//!
//! The argv is executed directly, never through a shell, its placeholders
//! filled in per event ([`crate::config::argv`]). The body goes to
//! stdin, then stdin is closed; the event is described in `HOOKBOX_SOURCE`,
//! `HOOKBOX_DESTINATION`, `HOOKBOX_EVENT_TYPE` (empty when the event has no type),
//! `HOOKBOX_DELIVERY_ID`, `HOOKBOX_EVENT_ID` and `HOOKBOX_ATTEMPT`, added
//! to hookbox's own environment less what is hookbox's alone: the
//! variables holding its secrets and [`WITHHELD_ENV`]. Exit status 0
//! is delivered; any other exit, a signal, a program that cannot start, and
//! the timeout are retried, except arguments this event's placeholders made
//! that can never be passed (a NUL byte, too long): the event is dead.
//!
//! The child leads its own process group. On timeout the whole group gets
//! SIGKILL, so a handler's own children (`sh -c 'curl ... &'`) die with it,
//! and the child is reaped; an attempt abandoned mid-run (its future
//! dropped, as at the end of a shutdown grace period) kills the group too.
//! Writing stdin, reading stdout and stderr and waiting all run at once: a
//! child that ignores stdin, or floods its output, cannot stall hookbox.
//! Output beyond [`BYTES_MAX`] bytes per stream is read and discarded.
//! Once the child has exited, leftover output (from a grandchild still
//! holding the pipes) is awaited for [`OUTPUT_GRACE`] at most.

use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{ChildStdin, Command};
use tokio::time::{Instant, sleep_until, timeout_at};

use crate::config::argv::{Event, Template};
use crate::delivery::{Attempt, Destination, Job, Outcome};
use crate::support::excerpt::{self, BYTES_MAX};

/// `E2BIG`: the argument list is too long for `execve`.
const E2BIG: i32 = nix::errno::Errno::E2BIG as i32;

/// How long output is still collected after the child exits.
pub const OUTPUT_GRACE: Duration = Duration::from_millis(200);

/// systemd's hand-over to hookbox itself, never passed on: where its
/// credentials (secrets) are, the notify socket and watchdog (a child
/// could speak for hookbox), and the sockets of socket activation.
pub const WITHHELD_ENV: [&str; 7] = [
    "CREDENTIALS_DIRECTORY",
    "NOTIFY_SOCKET",
    "WATCHDOG_PID",
    "WATCHDOG_USEC",
    "LISTEN_PID",
    "LISTEN_FDS",
    "LISTEN_FDNAMES",
];

pub struct CommandDestination {
    argv: Template,
    timeout: Duration,
    /// Variables holding hookbox's secrets (`Config::secret_env`), not
    /// passed on.
    withheld: Arc<[String]>,
}

impl Destination for CommandDestination {
    fn deliver<'a>(&'a self, job: &'a Job) -> Pin<Box<dyn Future<Output = Attempt> + Send + 'a>> {
        Box::pin(CommandDestination::deliver(self, job))
    }

    /// Dropping the attempt kills the command's process group; it may
    /// have had effects by then, so the attempt is recorded.
    fn interruptible(&self) -> bool {
        true
    }
}

impl CommandDestination {
    /// `argv` must not be empty (config validation ensures it).
    pub fn new(argv: Template, timeout: Duration, withheld: Arc<[String]>) -> Self {
        CommandDestination {
            argv,
            timeout,
            withheld,
        }
    }

    /// One attempt. Never fails: every problem is an [`Attempt`] to record.
    pub async fn deliver(&self, job: &Job) -> Attempt {
        let started = Instant::now();
        let (outcome, error) = self.run(job, started + self.timeout).await;
        Attempt {
            outcome,
            status: None,
            duration: started.elapsed(),
            error,
        }
    }

    async fn run(&self, job: &Job, deadline: Instant) -> (Outcome, Option<String>) {
        let retry = Outcome::Retry { retry_after: None };
        let argv = argv(&self.argv, job);
        let Some((program, args)) = argv.split_first() else {
            return (retry, Some("no program to run".to_owned()));
        };
        let mut command = Command::new(program);
        for name in WITHHELD_ENV
            .iter()
            .copied()
            .chain(self.withheld.iter().map(String::as_str))
        {
            command.env_remove(name);
        }
        let spawned = command
            .args(args)
            .envs(event_env(job))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            // The arguments this event's placeholders made can never be
            // passed (a NUL byte, or more than the kernel takes): trying
            // again would fail the same way.
            Err(e)
                if e.kind() == std::io::ErrorKind::InvalidInput
                    || e.raw_os_error() == Some(E2BIG) =>
            {
                return (
                    Outcome::Dead,
                    Some(format!(
                        "cannot start {program}: this event's arguments cannot be passed ({})",
                        if e.raw_os_error() == Some(E2BIG) {
                            "too long"
                        } else {
                            "a NUL byte"
                        }
                    )),
                );
            }
            Err(e) => {
                return (
                    retry,
                    Some(excerpt::bytes(
                        format!("cannot start {program}: {e}").as_bytes(),
                    )),
                );
            }
        };
        // With process_group(0) the group id is the child's pid. The pid
        // stays the child's until it is reaped, which happens only below.
        let mut group = GroupGuard(
            child
                .id()
                .and_then(|id| i32::try_from(id).ok())
                .map(Pid::from_raw),
        );
        let (stdin, stdout, stderr) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take());

        let mut out = Vec::new();
        let mut err = Vec::new();
        let waited = {
            let io = async {
                tokio::join!(
                    feed(stdin, &job.body),
                    capture(stdout, &mut out),
                    capture(stderr, &mut err)
                )
            };
            tokio::pin!(io);
            let mut io_done = false;
            let waited = loop {
                tokio::select! {
                    biased;
                    status = child.wait() => break Some(status),
                    _ = &mut io, if !io_done => io_done = true,
                    _ = sleep_until(deadline) => break None,
                }
            };
            if waited.is_some() {
                // Reaped: the pid may be reused from now on.
                group.disarm();
            }
            if waited.is_some() && !io_done {
                let grace = deadline.min(Instant::now() + OUTPUT_GRACE);
                let _ = timeout_at(grace, &mut io).await;
            }
            waited
        };

        match waited {
            Some(Ok(status)) if status.success() => (Outcome::Delivered, None),
            Some(Ok(status)) => (retry, Some(failure(&describe(status), &out, &err))),
            Some(Err(e)) => (
                retry,
                Some(excerpt::bytes(
                    format!("cannot wait for the command: {e}").as_bytes(),
                )),
            ),
            None => {
                group.kill();
                // kill_on_drop would kill, not reap: wait for the zombie.
                let _ = child.wait().await;
                let what = format!(
                    "timed out after {}",
                    humantime::format_duration(self.timeout)
                );
                (retry, Some(failure(&what, &out, &err)))
            }
        }
    }
}

/// The child's process group, killed when the attempt is abandoned (its
/// future dropped, say at shutdown) before the child was reaped:
/// `kill_on_drop` alone would spare the grandchildren.
struct GroupGuard(Option<Pid>);

impl GroupGuard {
    fn kill(&mut self) {
        if let Some(group) = self.0.take() {
            // ESRCH only means every member is already gone.
            let _ = killpg(group, Signal::SIGKILL);
        }
    }

    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Writes the body and closes stdin. A child that exits without reading
/// makes this fail with a broken pipe, which is its business, not an error.
/// The argv `template` makes for `job` (its placeholders read the body
/// as it is sent: a transform's output, when there is one).
pub fn argv(template: &Template, job: &Job) -> Vec<String> {
    template.render(&Event {
        source: &job.source,
        destination: &job.destination,
        delivery_id: &job.delivery_id,
        event_type: job.event_type.as_deref(),
        body: &job.body,
    })
}

/// The variables that describe `job`'s event to the command.
pub fn event_env(job: &Job) -> [(&'static str, String); 6] {
    [
        ("HOOKBOX_SOURCE", job.source.clone()),
        ("HOOKBOX_DESTINATION", job.destination.clone()),
        (
            "HOOKBOX_EVENT_TYPE",
            job.event_type.clone().unwrap_or_default(),
        ),
        ("HOOKBOX_DELIVERY_ID", job.delivery_id.clone()),
        ("HOOKBOX_EVENT_ID", job.event_id.to_string()),
        ("HOOKBOX_ATTEMPT", job.attempt.to_string()),
    ]
}

async fn feed(stdin: Option<ChildStdin>, body: &[u8]) {
    if let Some(mut stdin) = stdin {
        let _ = stdin.write_all(body).await;
        let _ = stdin.shutdown().await;
    }
}

/// Reads a stream to its end, keeping the first [`BYTES_MAX`] bytes.
async fn capture(stream: Option<impl AsyncRead + Unpin>, into: &mut Vec<u8>) {
    let Some(mut stream) = stream else { return };
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let room = BYTES_MAX.saturating_sub(into.len());
                into.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => status.to_string(),
    }
}

/// `what`, then stderr (or stdout when stderr is empty), within the bound.
fn failure(what: &str, out: &[u8], err: &[u8]) -> String {
    let output = if err.is_empty() { out } else { err };
    let mut text = what.as_bytes().to_vec();
    if !output.is_empty() {
        text.extend_from_slice(b": ");
        text.extend_from_slice(output.trim_ascii_end());
    }
    excerpt::bytes(&text)
}

#[cfg(test)]
mod tests;
