//! `hookbox listen`: a client of another hookbox's pull API that forwards
//! each event to a local URL. It needs no config and no database, so it
//! runs before `main` loads either; the loop itself is [`super::consume`].

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use crate::cli::ListenArgs;
use crate::config;

/// Exit 2 for a token that cannot be read, 1 when the loop fails.
pub fn run(args: ListenArgs) -> ExitCode {
    let ListenArgs {
        url,
        source,
        destination,
        token,
        forward_to,
        once,
        max,
        ca,
    } = args;
    let token = match config::resolve_secret(&token) {
        Ok(token) => token,
        Err(why) => {
            eprintln!("hookbox listen: --token: {why}");
            return ExitCode::from(2);
        }
    };
    let listen = super::Listen {
        url,
        source,
        destination,
        token,
        forward_to,
        once,
        max: usize::from(max),
        wait: Duration::from_secs(20),
        ca,
    };
    let ran = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")
        .and_then(|runtime| {
            let ran = runtime.block_on(async {
                let stop = CancellationToken::new();
                crate::service::shutdown::cancel_then_exit_on_signal(stop.clone())?;
                super::consume(listen, stop).await
            });
            // A name lookup still running on a blocking thread must not
            // hold up the exit Ctrl-C promised.
            runtime.shutdown_background();
            ran
        });
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hookbox listen: {e:#}");
            ExitCode::FAILURE
        }
    }
}
