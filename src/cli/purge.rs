//! `hookbox purge --dead --older-than D`: deletes dead events for good, by
//! hand, where retention would keep them; the SQL is `store::retention`'s.

use std::process::ExitCode;
use std::time::Duration;

use super::{report, with_store};
use crate::config::Config;
use crate::store::retention;

/// Prints how many events went; exit 1 on any error.
pub fn run(config: &Config, older_than: Duration, source: Option<&str>) -> ExitCode {
    report("purge", purge(config, older_than, source))
}

fn purge(config: &Config, older_than: Duration, source: Option<&str>) -> anyhow::Result<()> {
    let older_than_ms = i64::try_from(older_than.as_millis())
        .map_err(|_| anyhow::anyhow!("--older-than is too long"))?;
    let before = crate::support::clock::now_ms().saturating_sub(older_than_ms);
    let source = source.map(str::to_owned);
    let n = with_store(config, |store, writer| async move {
        retention::purge_dead(&store, &writer, before, source).await
    })?;
    println!("{n} dead event(s) purged");
    Ok(())
}
