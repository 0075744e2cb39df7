//! `hookbox catch-up SOURCE`: one catch-up pass on demand, for an operator
//! who knows the provider failed to deliver and will not wait for the
//! next interval. The pass is `crate::catchup`'s; this prints its report.
//! With `--report`, it runs nothing and prints the source's completeness
//! ledger (`crate::store::ledger`).

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

/// Passes `--report` lists under its summary.
const REPORT_PASSES: usize = 20;

/// `hookbox catch-up SOURCE --report`: the ledger's line for `window` and
/// the newest passes. Exit 0 when nothing is missing, 1 otherwise.
pub fn ledger(config: &Config, source: &str, window: Duration) -> ExitCode {
    match ledger_text(config, source, window) {
        Ok((text, missing)) => {
            print!("{text}");
            if missing == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => super::report("catch-up", Err(e)),
    }
}

fn ledger_text(config: &Config, source: &str, window: Duration) -> anyhow::Result<(String, u32)> {
    use std::fmt::Write;

    use crate::store::ledger;
    use crate::support::clock::format_ms;

    anyhow::ensure!(
        config.source(source).is_some(),
        "no enabled source named {source:?} in {}",
        config.origin
    );
    let job = crate::catchup::tasks(config)
        .into_iter()
        .find(|j| j.source == source)
        .map(|j| j.name())
        .ok_or_else(|| anyhow::anyhow!("source {source:?} has no catch-up job, so no ledger"))?;
    let conn = crate::store::open_read_only(&config.server.database)?;
    let since = crate::support::clock::now_ms() - window.as_millis() as i64;
    let summary = ledger::summary(&conn, source, since)?;
    let passes = ledger::recent(&conn, source, REPORT_PASSES)?;
    let mut out = format!(
        "{source} {job}\n{}\n",
        crate::catchup::completeness_line(&summary, window)
    );
    for e in &passes {
        let incomplete = if e.complete { "" } else { " (incomplete)" };
        let _ = writeln!(
            out,
            "pass {}{incomplete}: since {}: {} listed, {} held, {} recovered, {} left to the provider, {} missing ({})",
            format_ms(e.window_end),
            e.window_start.map(format_ms).unwrap_or_else(|| "-".into()),
            e.listed,
            e.held,
            e.recovered,
            e.pending,
            e.missing,
            e.missing_by.describe()
        );
        if let Some(from) = e.uncovered_from {
            let _ = writeln!(
                out,
                "  the provider no longer keeps what happened from {} to {}",
                format_ms(from),
                e.window_start.map(format_ms).unwrap_or_else(|| "-".into())
            );
        }
    }
    Ok((out, summary.missing))
}
