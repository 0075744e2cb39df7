//! `hookbox-floor`: what this machine allows any webhook receiver, measured
//! without hookbox, so that hookbox's own figures can be read against it.
//!
//! Three measurements, each of one part of the receive path on its own:
//!
//! * `disk`: appends to a file with an `fdatasync` after each, at several
//!   sizes: how fast the disk makes bytes durable, the wait every answer
//!   of a durable receiver includes.
//! * `store`: the least a durable SQLite inbox does per event. One table
//!   with a unique `(source, delivery_id)` key, GitHub-sized rows, group
//!   commit in WAL mode with the WAL's `fdatasync` on a thread of its own
//!   and passive checkpoints on another, as hookbox does; no HTTP, no
//!   signature, no other index. With `--ids random` the ids land anywhere
//!   in the unique index, as GitHub's GUIDs do; `sequential` numbers them.
//! * `http`: an HTTP/1.1 server that reads each request's body and answers
//!   `202` at once, for `wrk` (or `hookbox-loadgen`'s connections) to
//!   drive: the cost of the connections alone.
//!
//! `bench/floor.sh` runs all three and prints them beside the targets.
//! Each prints one line for people and one JSON line for the script.

mod disk;
mod http;
mod store;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "hookbox-floor",
    version,
    about = "What this machine allows any webhook receiver"
)]
struct Cli {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand, Debug)]
enum What {
    /// fdatasync throughput of appends, at several sizes.
    Disk {
        /// A directory on the file system the database would live on.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// Bytes written at each size (the file is removed afterwards).
        #[arg(long, default_value_t = 64 << 20)]
        bytes: u64,
    },
    /// Durable group commits of GitHub-sized events into SQLite.
    Store {
        /// A directory on the file system the database would live on.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        #[arg(long, value_enum, default_value_t = store::Ids::Random)]
        ids: store::Ids,
        /// Events per transaction: hookbox's groups are ~30 under 64
        /// connections.
        #[arg(long, default_value_t = 32)]
        group: usize,
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
    },
    /// Answers every POST 202 after reading its body; runs until killed.
    Http {
        #[arg(long, default_value = "127.0.0.1:18080")]
        listen: std::net::SocketAddr,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hookbox-floor: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.what {
        What::Disk { dir, bytes } => {
            for figure in disk::measure(&dir, bytes)? {
                println!("{figure}");
                println!("{}", figure.json());
            }
        }
        What::Store {
            dir,
            ids,
            group,
            seconds,
        } => {
            let run_for = std::time::Duration::try_from_secs_f64(seconds)
                .with_context(|| format!("--seconds {seconds}"))?;
            let figure = store::measure(&dir, ids, group, run_for)?;
            println!("{figure}");
            println!("{}", figure.json());
        }
        What::Http { listen } => http::serve(listen)?,
    }
    Ok(())
}
