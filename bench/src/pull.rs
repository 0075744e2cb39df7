//! `--pull` runs: the bench's GitHub source gets one `pull` destination
//! (`pull = { token = .. }`, default settings, no `order_key`) and
//! consumers take its events through the pull API of the real release
//! binary.
//!
//! * `latency` (`pull_latency`): one consumer long-polls (`max=10`,
//!   `wait=20s`) and acks what it gets, while one connection posts an event
//!   every 20 ms; the hand-off latency is from each 202 to the take's answer
//!   holding that event.
//! * `listen` (`pull_listen`): `--events` events are stored first, then the
//!   real `hookbox listen --once` forwards them to the local downstream;
//!   events/s, each delivered exactly once, every row `delivered`.
//! * `idle` (`pull_idle`): the server's CPU and memory with no poll, then
//!   with `--long-polls` long-polls waiting; then a few events while they
//!   all wait (every one of them is woken by each insert).
//!
//! `client` speaks the pull API, `consumers` runs long-polling consumers
//! on a thread of their own, `listen` runs the `hookbox listen` binary,
//! `fill` stores a backlog, `report` holds what the scenarios measure and
//! print; each scenario has its own file. The scenarios print a summary line and
//! a JSON line (with `"kind": "pull"`, which `bench/run.sh` tables apart)
//! and fail the run when a check does.

mod client;
mod consumers;
pub mod fill;
mod idle;
mod latency;
pub mod listen;
pub mod report;

use anyhow::Result;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::Args;
use crate::server::{Deliver, Pull};
use fill::fill;
use report::{Checks, CpuWindow, Handoff, Latencies, Stored, log_warnings, print_json};

/// The pull destination's name in the generated config.
pub const DESTINATION: &str = "pull";
/// Its token: a literal in the generated config, sent as the bearer.
pub const TOKEN: &str = "bench-pull-token-0123456789";
/// The bench's source.
const SOURCE: &str = "github";

/// Events per take, as `hookbox listen` asks by default.
const TAKE_MAX: usize = 10;
/// How long a take waits when nothing is due.
const TAKE_WAIT: Duration = Duration::from_secs(20);
/// A consumer's ack gets this long before the run gives up on it.
const ACK_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a wait for consumers looks at what they took.
const POLL: Duration = Duration::from_millis(10);

/// Which pull scenario to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    Latency,
    Listen,
    Idle,
}

impl Mode {
    pub fn scenario(self) -> &'static str {
        match self {
            Mode::Latency => "pull_latency",
            Mode::Listen => "pull_listen",
            Mode::Idle => "pull_idle",
        }
    }
}

/// The source's pull destination; `long_polls` raises the edge's bound on
/// long-polls per address (the bench's all come from 127.0.0.1).
pub fn destination(long_polls: Option<u32>) -> Deliver {
    Deliver::Pull(Pull {
        name: DESTINATION.to_owned(),
        token: TOKEN.to_owned(),
        max_client_long_polls: long_polls,
    })
}

/// Runs one pull scenario; returns whether every check passed.
pub async fn run(args: &Args, mode: Mode, binary: &Path, nonce: u64) -> Result<bool> {
    match mode {
        Mode::Latency => latency::run(args, binary, nonce).await,
        Mode::Listen => listen::run(args, binary, nonce).await,
        Mode::Idle => idle::run(args, binary, nonce).await,
    }
}

/// A consumer of the bench's pull destination.
fn client(addr: SocketAddr) -> Result<client::Client> {
    client::Client::new(addr, SOURCE, DESTINATION, TOKEN)
}
