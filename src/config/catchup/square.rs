//! `[sources.square_backfill]`: fetching from Square's Events API what a
//! `square` source missed.
//!
//! [`validate`] turns the table into the [`SquareBackfillConfig`]
//! `crate::catchup::square` runs on, resolving the token and reporting
//! every problem under its key, as `validate_stripe` does.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{check_api_url, hour, resolve, ten_minutes};
use crate::config::{Secret, duration, limits, secret};

pub const SQUARE_API: &str = "https://connect.squareup.com";

/// The `square_backfill` table as written.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawSquareBackfill {
    /// Secret reference: the application's personal access token (the
    /// Events API takes no OAuth token).
    pub access_token: String,
    #[serde(default = "hour", with = "duration")]
    pub interval: Duration,
    #[serde(default = "ten_minutes", with = "duration")]
    pub overlap: Duration,
    /// `https://connect.squareupsandbox.com` for the sandbox.
    #[serde(default = "square_api")]
    pub api_url: String,
    /// Only these event types (`payment.updated`); empty: every type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub types: Vec<String>,
}

/// Written by hand: `access_token` may be a literal.
impl fmt::Debug for RawSquareBackfill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawSquareBackfill")
            .field("access_token", &secret::describe(&self.access_token))
            .field("interval", &self.interval)
            .field("overlap", &self.overlap)
            .field("api_url", &self.api_url)
            .field("types", &self.types)
            .finish()
    }
}

fn square_api() -> String {
    SQUARE_API.to_owned()
}

#[derive(Debug, Clone)]
pub struct SquareBackfillConfig {
    pub access_token: Secret,
    pub interval: Duration,
    pub overlap: Duration,
    /// Without a trailing `/`.
    pub api_url: String,
    pub types: Vec<String>,
}

/// Checks a `square_backfill` table; `at` is its key.
pub fn validate(
    raw: &RawSquareBackfill,
    at: &str,
    problems: &mut Vec<String>,
) -> Option<SquareBackfillConfig> {
    let before = problems.len();
    let access_token = resolve(&raw.access_token, &format!("{at}.access_token"), problems);
    limits::SQUARE_INTERVAL.check(at, raw.interval, problems);
    limits::SQUARE_OVERLAP.check(at, raw.overlap, problems);
    let api_url = check_api_url(&raw.api_url, at, problems);
    for (j, t) in raw.types.iter().enumerate() {
        if t.trim().is_empty() {
            problems.push(format!("{at}.types[{j}]: must not be empty"));
        }
    }
    if problems.len() != before {
        return None;
    }
    Some(SquareBackfillConfig {
        access_token: access_token?,
        interval: raw.interval,
        overlap: raw.overlap,
        api_url: api_url?,
        types: raw.types.clone(),
    })
}
