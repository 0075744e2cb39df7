//! SIGTERM and SIGINT become one `CancellationToken` every part watches.

use anyhow::Context;
use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Cancels `token` on the first SIGTERM or SIGINT.
pub fn cancel_on_signal(token: CancellationToken) -> anyhow::Result<()> {
    let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
    tokio::spawn(async move {
        let which = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(signal = which, "shutting down");
        token.cancel();
    });
    Ok(())
}

/// As [`cancel_on_signal`], for a command in the foreground: a second
/// SIGTERM or SIGINT exits the process at once with 128 + the signal's
/// number (130 for Ctrl-C), for a user who will not wait for the goodbye.
/// Without it the second Ctrl-C would do nothing: tokio's handler has
/// replaced the default one for good.
pub fn cancel_then_exit_on_signal(token: CancellationToken) -> anyhow::Result<()> {
    let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
    tokio::spawn(async move {
        let mut first = true;
        loop {
            let code = tokio::select! {
                _ = term.recv() => 128 + Signal::SIGTERM as i32,
                _ = int.recv() => 128 + Signal::SIGINT as i32,
            };
            if !first {
                std::process::exit(code);
            }
            first = false;
            token.cancel();
        }
    });
    Ok(())
}
