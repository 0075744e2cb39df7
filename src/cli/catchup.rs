//! `hookbox catch-up SOURCE`: one catch-up pass on demand, for an operator
//! who knows the provider failed to deliver and will not wait for the
//! next interval. The pass is `crate::catchup`'s; this prints its report.

use std::process::ExitCode;
use std::time::Duration;

use super::{current_thread_runtime, report};
use crate::config::Config;

/// How long `catch-up` waits for a pass the server is running.
const CATCH_UP_WAIT: Duration = Duration::from_secs(120);

/// Exit 0 when the pass read its whole window and every request went
/// through (or was refused for good); 1 otherwise, with the report printed
/// either way.
pub fn run(config: &Config, source: &str, dry_run: bool) -> ExitCode {
    let runtime = match current_thread_runtime() {
        Ok(r) => r,
        Err(e) => return report("catch-up", Err(e)),
    };
    let ran = runtime.block_on(crate::catchup::run_cli(
        config,
        source,
        dry_run,
        CATCH_UP_WAIT,
    ));
    match ran {
        Ok(r) => {
            print!("{r}");
            if r.complete {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => report("catch-up", Err(e)),
    }
}
