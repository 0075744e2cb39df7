//! The `hookbox` command's verbs, so that `main.rs` is only the parse and
//! the dispatch, and each verb can be read (and changed) on its own.
//!
//! [`args`] is the command line as clap reads it, help text included. Each
//! other module is one verb or a small group of them: it takes the parsed
//! arguments and the loaded config, does the work through the library
//! (the store, the dispatcher's replay plans, the catch-up jobs), prints
//! what it did and picks the exit code. Rendering for the terminal lives
//! here, never in the store. Verbs that touch the database open their own
//! connection, so they work whether or not a server runs: those that
//! write, a writer of their own sending the server's writes
//! (`store::open_for_cli`, through [`with_store`]); those that only look,
//! a read-only one (`store::open_read_only`).

use std::path::Path;
use std::process::ExitCode;

use crate::config::{self, Config};
use crate::ingress::receive::registry::PROVIDERS;

pub mod alerts;
pub mod args;
pub mod backup;
pub mod catchup;
pub mod check;
pub mod destination;
pub mod events;
pub mod healthcheck;
pub mod listen;
pub mod manual;
pub mod purge;
pub mod replay;
pub mod serve;
pub mod trial;

pub use args::{
    AlertsCommand, Cli, Command, DestinationCommand, EventsArgs, ListenArgs, ReplayArgs, TryArgs,
};

/// The config from `path` (or the default places), with secrets resolved
/// only when `secrets`; on failure the problems are printed and the exit
/// code is 2, as for any bad usage.
pub fn load_config(path: Option<&Path>, secrets: bool) -> Result<Config, ExitCode> {
    let loaded = if secrets {
        config::load(path, &PROVIDERS)
    } else {
        config::load_without_secrets(path, &PROVIDERS)
    };
    loaded.map_err(|e| {
        eprint!("{e}");
        ExitCode::from(2)
    })
}

/// Prints a verb's error the way every verb does and picks the exit code.
pub fn report(verb: &str, result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hookbox {verb}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `f` with the store and a writer of the verb's own
/// (`store::open_for_cli`), on a runtime of this thread; then stops the
/// writer, once `f` has dropped what it was given.
fn with_store<T, F>(
    config: &Config,
    f: impl FnOnce(crate::store::Store, crate::store::WriterHandle) -> F,
) -> anyhow::Result<T>
where
    F: std::future::Future<Output = anyhow::Result<T>>,
{
    let (store, writer, thread) = crate::store::open_for_cli(&config.server.database)?;
    let done = current_thread_runtime()?.block_on(f(store, writer));
    thread.join();
    done
}

/// A runtime on this thread for a verb that makes a few requests.
fn current_thread_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context as _;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")
}
