//! `hookbox alerts test`: one message to each configured receiver, so an
//! operator learns that a webhook URL or topic is wrong now rather than
//! during the first outage.

use std::process::ExitCode;

use super::{current_thread_runtime, report};
use crate::config::Config;

/// A line per alert, exit 1 when any failed.
pub fn test(config: &Config) -> ExitCode {
    if config.alerts.is_empty() {
        eprintln!(
            "hookbox alerts test: the config ({}) has no [[alerts]]",
            config.origin
        );
        return ExitCode::FAILURE;
    }
    let runtime = match current_thread_runtime() {
        Ok(r) => r,
        Err(e) => return report("alerts test", Err(e)),
    };
    let results = match runtime.block_on(crate::alerts::test_all(config)) {
        Ok(results) => results,
        Err(e) => return report("alerts test", Err(e)),
    };
    let mut failed = false;
    for (alert, result) in results {
        match result {
            Ok(()) => println!("{alert}: sent"),
            Err(why) => {
                failed = true;
                println!("{alert}: FAILED: {why}");
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
