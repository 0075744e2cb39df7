//! `hookbox backup DEST`: a checked copy of the database on demand, safe
//! beside a running server. The copying is `store::backup`'s (shared with
//! the scheduled snapshots); this names the result.

use std::path::Path;
use std::process::ExitCode;

use super::report;
use crate::config::Config;
use crate::store::backup;

/// Prints where the copy went; exit 1 if it could not be made or checked.
pub fn run(config: &Config, dest: &Path, force: bool) -> ExitCode {
    report("backup", copy(config, dest, force))
}

fn copy(config: &Config, dest: &Path, force: bool) -> anyhow::Result<()> {
    let source = backup::open_source(&config.server.database)?;
    let copied = backup::write(&source, dest, force)?;
    println!(
        "wrote {} ({} bytes, integrity_check ok)",
        copied.path.display(),
        copied.size_bytes
    );
    Ok(())
}
