//! hookbox's side of the transform processes: a few long-lived children
//! (`hookbox __transform`, [`super::child`]), each answering one request
//! at a time, handed out to whichever attempt needs one.
//!
//! A child that does not answer within the time bound is killed with its
//! request (SIGKILL, so a loop takes a core for no longer than that), and
//! one whose pipe closes (a stack overflow, memory past its limit) is
//! reaped; either way the delivery fails with the reason and the next
//! request gets a new child. Children run with an empty environment: the
//! environment holds hookbox's secrets.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Semaphore;

use super::child::{ARG, MEMORY_LIMIT};
use super::eval::Reply;
use super::frame::{self, MAX_FRAME};

/// The variable that names the `hookbox` binary to start as the transform
/// process, when the running program is not it (tests that build the
/// server inside their own binary).
pub const EXE_VAR: &str = "HOOKBOX_TRANSFORM_EXE";

/// How long one program may run on one event.
pub const TIME_LIMIT: Duration = Duration::from_secs(1);

/// How long a new process may take to start and compile the programs.
const START_LIMIT: Duration = Duration::from_secs(10);

/// The processes that run one set of programs.
pub struct Pool {
    exe: PathBuf,
    /// The programs' frame, each child's first.
    programs: Vec<u8>,
    idle: Mutex<Vec<Worker>>,
    /// One per child that may run at once.
    slots: Semaphore,
    time_limit: Duration,
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Pool {
    /// A pool for `programs`, whose indexes the requests name. No process
    /// starts until the first request.
    pub fn new(programs: &[Arc<str>]) -> anyhow::Result<Pool> {
        let exe = match std::env::var_os(EXE_VAR) {
            Some(exe) => PathBuf::from(exe),
            None => std::env::current_exe()
                .map_err(|e| anyhow::anyhow!("finding hookbox's own binary: {e}"))?,
        };
        let texts: Vec<&str> = programs.iter().map(|p| &**p).collect();
        let children = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 4));
        Ok(Pool {
            exe,
            programs: frame::with_length(&serde_json::to_vec(&texts)?),
            idle: Mutex::new(Vec::new()),
            slots: Semaphore::new(children),
            time_limit: TIME_LIMIT,
        })
    }

    /// With a time bound other than [`TIME_LIMIT`].
    pub fn with_time_limit(mut self, limit: Duration) -> Self {
        self.time_limit = limit;
        self
    }

    /// Runs program `program` over `body` with `$event` = `event`.
    pub async fn run(&self, program: u32, event: &[u8], body: &[u8]) -> Reply {
        let Ok(_slot) = self.slots.acquire().await else {
            return Reply::Failed("the transform processes are shut down".into());
        };
        let idle = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let mut worker = match idle {
            Some(worker) => worker,
            None => match self.spawn().await {
                Ok(worker) => worker,
                Err(e) => {
                    return Reply::Unavailable(format!("cannot start a transform process: {e}"));
                }
            },
        };
        let request = frame::request(program, event, body);
        match tokio::time::timeout(self.time_limit, exchange(&mut worker, &request)).await {
            Ok(Ok(reply)) => {
                if let Ok(mut idle) = self.idle.lock() {
                    idle.push(worker);
                }
                reply
            }
            Ok(Err(_)) => Reply::Failed(format!(
                "the transform process died ({}): runaway recursion, or memory past {} MiB?",
                ended(worker.child).await,
                MEMORY_LIMIT >> 20
            )),
            Err(_) => {
                // Dropping it kills it (kill_on_drop); the runtime reaps it.
                drop(worker);
                Reply::Failed(format!(
                    "the program ran past its time limit of {} and was stopped",
                    humantime::format_duration(self.time_limit)
                ))
            }
        }
    }

    async fn spawn(&self) -> std::io::Result<Worker> {
        let mut child = Command::new(&self.exe)
            .arg(ARG)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(std::io::Error::other("the child's pipes are missing"));
        };
        stdin.write_all(&self.programs).await?;
        let mut worker = Worker {
            child,
            stdin,
            stdout: BufReader::new(stdout),
        };
        match tokio::time::timeout(START_LIMIT, read_reply(&mut worker)).await {
            Ok(Ok(Reply::Nothing)) => Ok(worker),
            Ok(Ok(_)) => Err(std::io::Error::other("an unexpected first answer")),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(std::io::Error::other(format!(
                "not ready within {}",
                humantime::format_duration(START_LIMIT)
            ))),
        }
    }
}

/// Sends one request and reads its reply.
async fn exchange(worker: &mut Worker, request: &[u8]) -> std::io::Result<Reply> {
    worker.stdin.write_all(request).await?;
    worker.stdin.flush().await?;
    read_reply(worker).await
}

/// Reads one reply.
async fn read_reply(worker: &mut Worker) -> std::io::Result<Reply> {
    let len = worker.stdout.read_u32_le().await? as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::other("a reply frame too long"));
    }
    let mut payload = vec![0u8; len];
    worker.stdout.read_exact(&mut payload).await?;
    frame::parse_reply(payload).ok_or_else(|| std::io::Error::other("a malformed reply"))
}

/// How a child whose pipe closed ended, in words.
async fn ended(mut child: Child) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match tokio::time::timeout(Duration::from_millis(500), child.wait()).await {
        Ok(Ok(status)) => match (status.code(), status.signal()) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(signal)) => {
                let name = nix::sys::signal::Signal::try_from(signal)
                    .map(|s| s.as_str().to_owned())
                    .unwrap_or_else(|_| signal.to_string());
                format!("signal {name}")
            }
            _ => "status unknown".to_owned(),
        },
        _ => "killed".to_owned(),
    }
}
