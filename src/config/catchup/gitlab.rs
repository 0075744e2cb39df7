//! `[sources.gitlab_redelivery]`: asking GitLab to resend what a `gitlab`
//! source missed, from a project hook or a group hook.
//!
//! [`validate`] turns the table into the [`GitlabRedeliveryConfig`]
//! `crate::catchup::gitlab` runs on, resolving the token and reporting
//! every problem under its key, as `validate_github` does.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{check_api_url, hook_id, hour, ten_minutes, token};
use crate::config::{Secret, duration, limits, secret};

pub const GITLAB_API: &str = "https://gitlab.com/api/v4";

/// A project or group as GitLab's API names it: its numeric id, or its
/// full path (`acme/shop`, or already URL-encoded `acme%2Fshop`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Namespace {
    Id(i64),
    Path(String),
}

/// The `gitlab_redelivery` table as written.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawGitlabRedelivery {
    /// A project hook's project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<Namespace>,
    /// A group hook's group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<Namespace>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_id: Option<i64>,
    /// Secret reference: a token with the `api` scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    #[serde(default = "hour", with = "duration")]
    pub interval: Duration,
    /// How far before the last successful run the next one looks again.
    #[serde(default = "ten_minutes", with = "duration")]
    pub overlap: Duration,
    #[serde(default = "gitlab_api")]
    pub api_url: String,
    /// Only resend events of these types (`X-Gitlab-Event`); empty = all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub event_types: Vec<String>,
    /// GitLab allows 5 resends a minute per user and project (or group);
    /// an administrator may change that on a self-managed instance.
    #[serde(default = "five")]
    pub resend_limit: u32,
    #[serde(default = "minute", with = "duration")]
    pub resend_window: Duration,
}

/// Written by hand: `token` may be a literal.
impl fmt::Debug for RawGitlabRedelivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawGitlabRedelivery")
            .field("project", &self.project)
            .field("group", &self.group)
            .field("hook_id", &self.hook_id)
            .field("token", &self.token.as_deref().map(secret::describe))
            .field("interval", &self.interval)
            .field("overlap", &self.overlap)
            .field("api_url", &self.api_url)
            .field("event_types", &self.event_types)
            .field("resend_limit", &self.resend_limit)
            .field("resend_window", &self.resend_window)
            .finish()
    }
}

fn gitlab_api() -> String {
    GITLAB_API.to_owned()
}

fn five() -> u32 {
    5
}

fn minute() -> Duration {
    Duration::from_secs(60)
}

/// Whose hook it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitlabParent {
    /// The id as it goes in the URL: a number, or the path URL-encoded.
    Project(String),
    Group(String),
}

#[derive(Debug, Clone)]
pub struct GitlabRedeliveryConfig {
    pub parent: GitlabParent,
    pub hook_id: i64,
    pub token: Secret,
    pub interval: Duration,
    pub overlap: Duration,
    /// Without a trailing `/` (self-managed: `https://HOST/api/v4`).
    pub api_url: String,
    pub event_types: Vec<String>,
    pub resend_limit: u32,
    pub resend_window: Duration,
}

impl GitlabRedeliveryConfig {
    /// `/projects/{id}/hooks/{hook_id}` or `/groups/{id}/hooks/{hook_id}`.
    pub fn hook_path(&self) -> String {
        let (kind, id) = match &self.parent {
            GitlabParent::Project(id) => ("projects", id),
            GitlabParent::Group(id) => ("groups", id),
        };
        format!("/{kind}/{id}/hooks/{}", self.hook_id)
    }
}

/// Checks a `gitlab_redelivery` table; `at` is its key.
pub fn validate(
    raw: &RawGitlabRedelivery,
    at: &str,
    problems: &mut Vec<String>,
) -> Option<GitlabRedeliveryConfig> {
    let before = problems.len();
    let parent = match (&raw.project, &raw.group) {
        (Some(p), None) => {
            namespace(p, &format!("{at}.project"), problems).map(GitlabParent::Project)
        }
        (None, Some(g)) => namespace(g, &format!("{at}.group"), problems).map(GitlabParent::Group),
        _ => {
            problems.push(format!(
                "{at}: set exactly one of project or group (the hook's project or group, with hook_id and token)"
            ));
            None
        }
    };
    let hook_id = hook_id(
        raw.hook_id,
        at,
        "(the number in the hook's edit URL, or from GET /projects/:id/hooks)",
        problems,
    );
    let token = token(
        raw.token.as_deref(),
        at,
        "(a token with the api scope, of a Maintainer of the project or an Owner of the group)",
        problems,
    );
    limits::GITLAB_INTERVAL.check(at, raw.interval, problems);
    limits::GITLAB_OVERLAP.check(at, raw.overlap, problems);
    limits::GITLAB_RESEND_LIMIT.check(at, raw.resend_limit, problems);
    limits::GITLAB_RESEND_WINDOW.check(at, raw.resend_window, problems);
    let api_url = check_api_url(&raw.api_url, at, problems);
    for (j, t) in raw.event_types.iter().enumerate() {
        if t.trim().is_empty() {
            problems.push(format!("{at}.event_types[{j}]: must not be empty"));
        }
    }
    if problems.len() != before {
        return None;
    }
    Some(GitlabRedeliveryConfig {
        parent: parent?,
        hook_id: hook_id?,
        token: token?,
        interval: raw.interval,
        overlap: raw.overlap,
        api_url: api_url?,
        event_types: raw.event_types.clone(),
        resend_limit: raw.resend_limit,
        resend_window: raw.resend_window,
    })
}

/// A project or group id for the URL: a positive number, or a path of
/// segments of letters, digits, `_`, `-` and `.`, URL-encoded (`/` is
/// `%2F`, as GitLab wants it). An already encoded path is taken too.
fn namespace(ns: &Namespace, at: &str, problems: &mut Vec<String>) -> Option<String> {
    let path = match ns {
        Namespace::Id(id) if *id > 0 => return Some(id.to_string()),
        Namespace::Id(_) => {
            problems.push(format!("{at}: an id must be a positive number"));
            return None;
        }
        Namespace::Path(p) => p.replace("%2F", "/").replace("%2f", "/"),
    };
    if !path.is_empty() && path.bytes().all(|b| b.is_ascii_digit()) {
        return path
            .parse::<i64>()
            .ok()
            .filter(|id| *id > 0)
            .map(|id| id.to_string())
            .or_else(|| {
                problems.push(format!("{at}: an id must be a positive number"));
                None
            });
    }
    let ok = path.split('/').all(|segment| {
        !segment.is_empty()
            && segment != "."
            && segment != ".."
            && segment
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    });
    if !ok {
        problems.push(format!(
            "{at}: a numeric id or a full path like \"acme/shop\" (letters, digits, -, _, . between the /)"
        ));
        return None;
    }
    Some(path.replace('/', "%2F"))
}
