//! The transform process: `hookbox` started by hookbox itself with the
//! hidden first argument [`ARG`], which compiles the programs it is sent
//! and then answers one request at a time until its stdin closes.
//!
//! Whatever a program does to this process (a stack overflow from
//! runaway recursion, memory past [`MEMORY_LIMIT`], a loop) ends this
//! process only; hookbox sees the pipe close or its time bound pass,
//! fails that delivery and starts another process ([`super::pool`]).

use std::io::{BufReader, BufWriter, Write as _};
use std::process::ExitCode;

use super::eval::{self, Reply};
use super::frame;
use crate::config::transform::{Filter, compile};

/// The first argument that makes `hookbox` a transform process.
pub const ARG: &str = "__transform";

/// The address space a transform process may take beyond what it has
/// mapped when it starts: far more than any payload needs, short of what
/// a runaway `[range(1e10)]` would eat of the machine before its time
/// bound. Counted from the start, not from zero: the allocator reserves
/// an arena of address space (mimalloc: 1 GiB) before `main`, and a
/// limit below what is already mapped would leave the stack no room to
/// grow (SIGSEGV while compiling a program). So a program may use from
/// this much up to this plus the arena.
pub const MEMORY_LIMIT: u64 = 1 << 30;

/// Linux's default pipe buffer.
const PIPE_BYTES: usize = 1 << 16;

/// Runs the transform process on stdin and stdout.
pub fn serve() -> ExitCode {
    watch_parent();
    // Best effort: a system that refuses the limit (or does not say what
    // is mapped) still has the time bound.
    if let Some(mapped) = mapped_bytes() {
        let limit = mapped.saturating_add(MEMORY_LIMIT);
        let _ =
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_AS, limit, limit);
    }
    // As large as a pipe's buffer: a batch of requests is read, and its
    // replies written, in a few calls.
    let mut input = BufReader::with_capacity(PIPE_BYTES, std::io::stdin().lock());
    let mut output = BufWriter::with_capacity(PIPE_BYTES, std::io::stdout().lock());
    let programs: Vec<Result<Filter, String>> = match frame::read_sync(&mut input) {
        Ok(Some(list)) => match serde_json::from_slice::<Vec<String>>(&list) {
            Ok(texts) => texts.iter().map(|t| compile(t)).collect(),
            Err(_) => return ExitCode::FAILURE,
        },
        _ => return ExitCode::FAILURE,
    };
    // Ready: compiling is not a request's time.
    if frame::write_sync(&mut output, &frame::reply(&Reply::Nothing)).is_err() {
        return ExitCode::FAILURE;
    }
    loop {
        let payload = match frame::read_sync(&mut input) {
            Ok(Some(payload)) => payload,
            Ok(None) => return ExitCode::SUCCESS,
            Err(_) => return ExitCode::FAILURE,
        };
        let reply = match frame::parse_request(&payload) {
            Some((program, event, body)) => answer(&programs, program, event, body),
            None => Reply::Failed("a malformed request reached the transform process".into()),
        };
        // The replies of a batch go out together, once no whole request
        // is left to answer; one still arriving is not waited on unflushed.
        let reply = frame::reply(&reply);
        let written = if frame::whole_in(input.buffer()) {
            output.write_all(&reply)
        } else {
            frame::write_sync(&mut output, &reply)
        };
        if written.is_err() {
            return ExitCode::FAILURE;
        }
    }
}

/// The address space this process has mapped (`VmSize` of
/// `/proc/self/status`).
fn mapped_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmSize:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Ends this process once hookbox is gone. A process busy in a loop
/// never reads the end of its stdin, so a hookbox killed with SIGKILL (or
/// crashing) would otherwise leave it spinning on a core for good; its
/// parent changing is the sign. (`PR_SET_PDEATHSIG` fires when the
/// parent's *thread* that started it ends, which a runtime's threads do.)
/// Returns once the thread runs: a thread's start maps memory, which the
/// address-space limit set next may no longer allow.
fn watch_parent() {
    let parent = nix::unistd::getppid();
    let (running, started) = std::sync::mpsc::channel();
    let watcher = std::thread::Builder::new()
        .name("parent-watch".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            let _ = running.send(());
            loop {
                std::thread::sleep(PARENT_CHECK);
                if nix::unistd::getppid() != parent {
                    std::process::exit(1);
                }
            }
        });
    // Best effort: without the thread, the time bound still applies while
    // hookbox runs.
    if watcher.is_ok() {
        let _ = started.recv();
    }
}

/// How often a transform process checks that hookbox is still there.
const PARENT_CHECK: std::time::Duration = std::time::Duration::from_millis(200);

fn answer(programs: &[Result<Filter, String>], program: u32, event: &[u8], body: &[u8]) -> Reply {
    let filter = match programs.get(program as usize) {
        Some(Ok(filter)) => filter,
        Some(Err(why)) => return Reply::Failed(format!("the program does not compile: {why}")),
        None => return Reply::Failed("no such program in the transform process".into()),
    };
    match jaq_json::read::parse_single(event) {
        Ok(event) => eval::run(filter, event, body),
        Err(_) => Reply::Failed("the event's metadata did not reach the transform process".into()),
    }
}
