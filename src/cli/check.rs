//! `hookbox check`: the config as the server would load it, printed with
//! secrets redacted, so an operator sees what the files and the
//! environment add up to before restarting anything.

use std::process::ExitCode;

use crate::config::Config;
use crate::store::queries;

/// Prints the loaded config; `main` has already exited 2 if it is invalid.
pub fn run(config: &Config) -> ExitCode {
    println!("# hookbox configuration from {} (valid)", config.origin);
    print!("{}", config.redacted_toml());
    for warning in config.warnings().into_iter().chain(orphan_warnings(config)) {
        eprintln!("warning: {warning}");
    }
    ExitCode::SUCCESS
}

/// Destinations gone from the config whose deliveries the database still
/// holds. Only a look: nothing at all when there is no database yet or it
/// cannot be read (another schema version, no permission), as the config
/// itself is what `check` checks.
fn orphan_warnings(config: &Config) -> Vec<String> {
    let path = &config.server.database;
    if !path.exists() {
        return Vec::new();
    }
    crate::store::open_read_only(path)
        .and_then(|conn| queries::lane_counts(&conn))
        .map(|lanes| crate::store::orphans::warnings(config, &lanes))
        .unwrap_or_default()
}
