//! hookbox's side of the transform processes: a few long-lived children
//! (`hookbox __transform`, [`super::child`]), each fed by a driver task
//! that takes whatever requests are waiting, writes them to its child in
//! one go and reads the replies as they come.
//!
//! A round trip per request cost more than the program did (two pipe
//! writes, two reads, a wakeup on each side), so requests ride together:
//! a batch is whatever queued while the driver was busy (and what
//! [`Pool::submit`] queued at once: a busy lane's transforms run ahead),
//! and the child flushes only once it has answered all it holds.
//!
//! A child that sends no reply within the time bound is killed (SIGKILL,
//! so a loop takes a core for no longer than that); one whose pipe closes
//! (a stack overflow, memory past its limit) is reaped. Since the child
//! holds replies back until it has answered all it holds, which request
//! of a batch it broke on is unknown: the unanswered ones go to a new
//! child one at a time, and the one that breaks it alone fails with the
//! reason (so a runaway program takes up to twice the bound). Children
//! run with an empty environment: the environment holds hookbox's
//! secrets.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{Mutex, mpsc, oneshot};

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

/// The most requests written to a child at once, and the most bytes:
/// enough to carry a busy destination's queue, short of holding many
/// large bodies twice.
const BATCH_REQUESTS: usize = 64;
const BATCH_BYTES: usize = 1 << 20;

/// The processes that run one set of programs.
pub struct Pool {
    requests: mpsc::UnboundedSender<Request>,
    shared: Arc<Shared>,
    /// How many children (and drivers) there may be.
    children: usize,
    /// Set once the drivers run: they start with the first request, on
    /// the runtime that makes it.
    started: OnceLock<()>,
}

/// What the drivers share.
struct Shared {
    exe: PathBuf,
    /// The programs' frame, each child's first.
    programs: Vec<u8>,
    time_limit: Duration,
    /// The queue; a driver holds the lock only while it waits for work.
    queue: Mutex<mpsc::UnboundedReceiver<Request>>,
}

struct Request {
    frame: Vec<u8>,
    reply: oneshot::Sender<Reply>,
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// Why a child stopped answering a batch.
enum Broke {
    /// Its pipe closed or carried garbage.
    Died,
    /// No reply within the time bound.
    TimedOut,
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
        Ok(Pool::with(exe, texts, children, TIME_LIMIT)?)
    }

    /// A pool that starts `exe`, with `children` processes at most and
    /// `time_limit` per program run.
    pub fn with(
        exe: PathBuf,
        programs: Vec<&str>,
        children: usize,
        time_limit: Duration,
    ) -> serde_json::Result<Pool> {
        let (requests, queue) = mpsc::unbounded_channel();
        Ok(Pool {
            requests,
            shared: Arc::new(Shared {
                exe,
                programs: frame::with_length(&serde_json::to_vec(&programs)?),
                time_limit,
                queue: Mutex::new(queue),
            }),
            children: children.max(1),
            started: OnceLock::new(),
        })
    }

    /// Runs program `program` over `body` with `$event` = `event`.
    pub async fn run(&self, program: u32, event: &[u8], body: &[u8]) -> Reply {
        answered(self.submit([(program, event, body)]).pop()).await
    }

    /// Queues one request per `(program, event, body)` and returns where
    /// each answer will come, in order. Sent together, they reach a child
    /// as one batch: one write, one read and one wakeup on each side for
    /// all of them.
    pub fn submit<'a>(
        &self,
        requests: impl IntoIterator<Item = (u32, &'a [u8], &'a [u8])>,
    ) -> Vec<oneshot::Receiver<Reply>> {
        self.started.get_or_init(|| {
            for _ in 0..self.children {
                tokio::spawn(drive(self.shared.clone()));
            }
        });
        // Framed first, sent after: a driver woken by the first request
        // finds the others already queued.
        let (requests, answers): (Vec<Request>, Vec<_>) = requests
            .into_iter()
            .map(|(program, event, body)| {
                let (reply, answer) = oneshot::channel();
                let frame = frame::request(program, event, body);
                (Request { frame, reply }, answer)
            })
            .unzip();
        for request in requests {
            // Once the pool is shut down, its answer says so.
            let _ = self.requests.send(request);
        }
        answers
    }
}

/// The reply that comes to `answer`, or why none will.
pub async fn answered(answer: Option<oneshot::Receiver<Reply>>) -> Reply {
    match answer {
        Some(answer) => answer.await.unwrap_or_else(|_| shut_down()),
        None => shut_down(),
    }
}

fn shut_down() -> Reply {
    Reply::Failed("the transform processes are shut down".into())
}

/// One driver: takes batches off the queue and has its child answer them,
/// until the pool is dropped.
async fn drive(shared: Arc<Shared>) {
    let mut worker: Option<Worker> = None;
    let mut batch: VecDeque<Request> = VecDeque::new();
    // Requests to send one at a time: those a batch left unanswered when
    // its child broke. The child holds back replies until it has answered
    // every request it holds, so the one it broke on is not known until
    // each is tried alone.
    let mut suspects = 0usize;
    loop {
        if batch.is_empty() && !take_batch(&shared, &mut batch).await {
            return;
        }
        let mut current = match worker.take() {
            Some(current) => current,
            None => match spawn(&shared).await {
                Ok(started) => started,
                Err(e) => {
                    let why = format!("cannot start a transform process: {e}");
                    for request in batch.drain(..) {
                        let _ = request.reply.send(Reply::Unavailable(why.clone()));
                    }
                    suspects = 0;
                    continue;
                }
            },
        };
        let sent = if suspects > 0 { 1 } else { batch.len() };
        suspects = suspects.saturating_sub(1);
        let queued = batch.len();
        let Err(broke) = answer(&mut current, &mut batch, sent, shared.time_limit).await else {
            worker = Some(current);
            continue;
        };
        let unanswered = sent - (queued - batch.len());
        let why = match broke {
            Broke::Died => format!(
                "the transform process died ({}): runaway recursion, or memory past {} MiB?",
                ended(current.child).await,
                MEMORY_LIMIT >> 20
            ),
            Broke::TimedOut => {
                // Dropping it kills it (kill_on_drop); the runtime reaps it.
                drop(current);
                format!(
                    "the program ran past its time limit of {} and was stopped",
                    humantime::format_duration(shared.time_limit)
                )
            }
        };
        if sent == 1 {
            if let Some(request) = batch.pop_front() {
                let _ = request.reply.send(Reply::Failed(why));
            }
        } else {
            suspects = unanswered;
        }
    }
}

/// Waits for a request, then takes the others already queued, up to a
/// batch; false once the pool is gone.
async fn take_batch(shared: &Shared, batch: &mut VecDeque<Request>) -> bool {
    let mut queue = shared.queue.lock().await;
    let Some(first) = queue.recv().await else {
        return false;
    };
    let mut bytes = first.frame.len();
    batch.push_back(first);
    while batch.len() < BATCH_REQUESTS && bytes < BATCH_BYTES {
        match queue.try_recv() {
            Ok(request) => {
                bytes += request.frame.len();
                batch.push_back(request);
            }
            Err(_) => break,
        }
    }
    true
}

/// Writes the first `n` requests of the batch while reading their replies,
/// handing each to its request and taking it off the batch; on `Err`, the
/// unanswered ones are still there.
async fn answer(
    worker: &mut Worker,
    batch: &mut VecDeque<Request>,
    n: usize,
    time_limit: Duration,
) -> Result<(), Broke> {
    let sent = n.min(batch.len());
    let mut out = Vec::with_capacity(batch.iter().take(sent).map(|r| r.frame.len()).sum());
    for request in batch.iter().take(sent) {
        out.extend_from_slice(&request.frame);
    }
    let Worker { stdin, stdout, .. } = worker;
    // Writing and reading at once: a batch larger than the pipe holds
    // would otherwise wait on a child waiting on its own full stdout.
    let write = async {
        stdin.write_all(&out).await?;
        stdin.flush().await
    };
    let read = async {
        for _ in 0..sent {
            let reply = match tokio::time::timeout(time_limit, read_reply(stdout)).await {
                Ok(Ok(reply)) => reply,
                Ok(Err(_)) => return Err(Broke::Died),
                Err(_) => return Err(Broke::TimedOut),
            };
            if let Some(request) = batch.pop_front() {
                let _ = request.reply.send(reply);
            }
        }
        Ok(())
    };
    tokio::pin!(write, read);
    let mut writing = true;
    loop {
        tokio::select! {
            // A failed write means the child is gone: the read sees it.
            _ = &mut write, if writing => writing = false,
            done = &mut read => return done,
        }
    }
}

async fn spawn(shared: &Shared) -> std::io::Result<Worker> {
    let mut child = Command::new(&shared.exe)
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
    stdin.write_all(&shared.programs).await?;
    let mut stdout = BufReader::new(stdout);
    match tokio::time::timeout(START_LIMIT, read_reply(&mut stdout)).await {
        Ok(Ok(Reply::Nothing)) => Ok(Worker {
            child,
            stdin,
            stdout,
        }),
        Ok(Ok(_)) => Err(std::io::Error::other("an unexpected first answer")),
        Ok(Err(e)) => Err(std::io::Error::other(format!(
            "{e} ({})",
            ended(child).await
        ))),
        Err(_) => Err(std::io::Error::other(format!(
            "not ready within {}",
            humantime::format_duration(START_LIMIT)
        ))),
    }
}

/// Reads one reply.
async fn read_reply(stdout: &mut BufReader<ChildStdout>) -> std::io::Result<Reply> {
    let len = stdout.read_u32_le().await? as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::other("a reply frame too long"));
    }
    let mut payload = vec![0u8; len];
    stdout.read_exact(&mut payload).await?;
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
