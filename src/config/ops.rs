//! `[retention]` and `[backup]`: how long rows are kept, and where the
//! server writes its own snapshots; `[search]`: whether bodies are indexed
//! and how long a search may run.
//!
//! The tables have a default for every key, so a config without them
//! keeps delivered bodies 7 days and keys 30 days, and writes no
//! snapshots (`backup.dir` unset). [`validate`] reports each problem under
//! its key; `crate::service::maintenance` runs the jobs these configure.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{duration, limits};

/// `[retention]` as written; it is also what the server runs on.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Days a delivered (or stored) event keeps its body.
    pub body_days: u32,
    /// Days a delivered (or stored) event keeps its row, and so its key:
    /// a provider's resend within this window is answered "duplicate".
    pub key_days: u32,
    /// How often the retention job runs.
    #[serde(with = "duration")]
    pub interval: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            body_days: 7,
            key_days: 30,
            interval: Duration::from_secs(3600),
        }
    }
}

/// `[backup]` as written; it is also what the server runs on.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackupConfig {
    /// Where the server writes rotated snapshots; none are written when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// Time between two snapshots.
    #[serde(with = "duration")]
    pub interval: Duration,
    /// Snapshots kept; older ones are deleted after each new one.
    pub keep: usize,
}

impl Default for BackupConfig {
    fn default() -> Self {
        BackupConfig {
            dir: None,
            interval: Duration::from_secs(3600),
            keep: 24,
        }
    }
}

/// `[search]` as written; it is also what the server runs on.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SearchConfig {
    /// Index the words of UTF-8 bodies for `q=` (`crate::store::search`).
    /// Off, the index is emptied at start-up and `q=` is refused: for a
    /// self-hoster who does not want the words of bodies kept twice, or
    /// the writer's time spent on them.
    pub enabled: bool,
    /// How long one search may run before it is stopped and answered
    /// 503 `search_timeout`.
    #[serde(with = "duration")]
    pub timeout: Duration,
}

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig {
            enabled: true,
            timeout: Duration::from_secs(2),
        }
    }
}

/// Checks the three tables, pushing one line per problem.
pub fn validate(
    retention: &RetentionConfig,
    backup: &BackupConfig,
    search: &SearchConfig,
    problems: &mut Vec<String>,
) {
    limits::SEARCH_TIMEOUT.check("search", search.timeout, problems);
    limits::BODY_DAYS.check("retention", retention.body_days, problems);
    limits::KEY_DAYS.check("retention", retention.key_days, problems);
    if retention.key_days < retention.body_days {
        problems.push(format!(
            "retention.key_days: must be at least retention.body_days ({}): a row without its key cannot keep a body",
            retention.body_days
        ));
    }
    limits::RETENTION_INTERVAL.check("retention", retention.interval, problems);
    limits::BACKUP_INTERVAL.check("backup", backup.interval, problems);
    limits::BACKUP_KEEP.check("backup", backup.keep, problems);
    if backup
        .dir
        .as_ref()
        .is_some_and(|d| d.as_os_str().is_empty())
    {
        problems
            .push("backup.dir: must not be empty (leave it out to write no snapshots)".to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(retention: RetentionConfig, backup: BackupConfig) -> Vec<String> {
        let mut p = Vec::new();
        validate(&retention, &backup, &SearchConfig::default(), &mut p);
        p
    }

    #[test]
    fn the_defaults_are_valid() {
        assert!(problems(RetentionConfig::default(), BackupConfig::default()).is_empty());
    }

    #[test]
    fn each_problem_names_its_key() {
        let p = problems(
            RetentionConfig {
                body_days: 10,
                key_days: 5,
                interval: Duration::ZERO,
            },
            BackupConfig {
                dir: Some(PathBuf::new()),
                interval: Duration::ZERO,
                keep: 0,
            },
        );
        let text = p.join("\n");
        for key in [
            "retention.key_days: must be at least retention.body_days (10)",
            "retention.interval",
            "backup.interval",
            "backup.keep",
            "backup.dir",
        ] {
            assert!(text.contains(key), "missing {key:?} in:\n{text}");
        }
        assert_eq!(p.len(), 5, "{text}");
        let zero = problems(
            RetentionConfig {
                body_days: 0,
                ..RetentionConfig::default()
            },
            BackupConfig::default(),
        );
        assert_eq!(
            zero,
            vec!["retention.body_days: 0 is under the minimum of 1".to_owned()]
        );
    }
}
