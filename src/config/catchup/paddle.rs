//! `[sources.paddle_replay]`: asking Paddle to replay the notifications a
//! `paddle` source never got.
//!
//! [`validate`] turns the table into the [`PaddleReplayConfig`]
//! `crate::catchup::paddle` runs on, resolving the API key and reporting
//! every problem under its key, as `validate_github` does.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{check_api_url, hour, resolve, ten_minutes};
use crate::config::{Secret, duration, limits, secret};

pub const PADDLE_API: &str = "https://api.paddle.com";

/// The `paddle_replay` table as written.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawPaddleReplay {
    /// Secret reference: an API key with `notification.read` and
    /// `notification.write`.
    pub api_key: String,
    /// The notification destination (`ntfset_…`) this source receives.
    pub notification_setting_id: String,
    #[serde(default = "hour", with = "duration")]
    pub interval: Duration,
    /// How far before the last successful run the next one looks again.
    #[serde(default = "ten_minutes", with = "duration")]
    pub overlap: Duration,
    /// `https://sandbox-api.paddle.com` for the sandbox.
    #[serde(default = "paddle_api")]
    pub api_url: String,
}

/// Written by hand: `api_key` may be a literal.
impl fmt::Debug for RawPaddleReplay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawPaddleReplay")
            .field("api_key", &secret::describe(&self.api_key))
            .field("notification_setting_id", &self.notification_setting_id)
            .field("interval", &self.interval)
            .field("overlap", &self.overlap)
            .field("api_url", &self.api_url)
            .finish()
    }
}

fn paddle_api() -> String {
    PADDLE_API.to_owned()
}

#[derive(Debug, Clone)]
pub struct PaddleReplayConfig {
    pub api_key: Secret,
    pub notification_setting_id: String,
    pub interval: Duration,
    pub overlap: Duration,
    /// Without a trailing `/`.
    pub api_url: String,
}

/// Checks a `paddle_replay` table; `at` is its key.
pub fn validate(
    raw: &RawPaddleReplay,
    at: &str,
    problems: &mut Vec<String>,
) -> Option<PaddleReplayConfig> {
    let before = problems.len();
    let api_key = resolve(&raw.api_key, &format!("{at}.api_key"), problems);
    let id = &raw.notification_setting_id;
    let id_ok = id
        .strip_prefix("ntfset_")
        .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric()));
    if !id_ok {
        problems.push(format!(
            "{at}.notification_setting_id: the destination's id, like \"ntfset_01h…\" (Paddle > Developer tools > Notifications)"
        ));
    }
    limits::PADDLE_INTERVAL.check(at, raw.interval, problems);
    limits::PADDLE_OVERLAP.check(at, raw.overlap, problems);
    let api_url = check_api_url(&raw.api_url, at, problems);
    if problems.len() != before {
        return None;
    }
    Some(PaddleReplayConfig {
        api_key: api_key?,
        notification_setting_id: id.clone(),
        interval: raw.interval,
        overlap: raw.overlap,
        api_url: api_url?,
    })
}
