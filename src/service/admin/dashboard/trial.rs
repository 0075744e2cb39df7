//! A destination's Try page (`GET /destinations/{source}/{name}/try`): a
//! form picking stored events (one by id, the last N, or those since a
//! time) and, for each, whether the destination's filter takes it and
//! exactly what would be sent, from `POST /api/try`'s own work. Nothing is
//! sent, so the form is a GET: no CSRF token needed, and the page can be
//! bookmarked while a program is being written.

use axum::Extension;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use maud::{Markup, html};
use serde::Deserialize;

use super::session::Session;
use super::{Dashboard, PageError, view};
use crate::service::admin::trial::trials;
use crate::store::queries::Which;
use crate::support::clock;
use crate::support::error::ApiError;

#[derive(Debug, Default, Deserialize)]
pub(super) struct TryQuery {
    event: Option<String>,
    last: Option<String>,
    since: Option<String>,
}

/// Which events the form asks for: the first box filled in, else the last 10.
fn which(q: &TryQuery) -> Result<Which, ApiError> {
    fn filled(v: &Option<String>) -> Option<&str> {
        v.as_deref().map(str::trim).filter(|v| !v.is_empty())
    }
    let bad = |what: &str| ApiError::bad_request("invalid_filter", what.to_owned());
    if let Some(id) = filled(&q.event) {
        return id
            .parse()
            .map(Which::Event)
            .map_err(|_| bad("event: an event id"));
    }
    if let Some(since) = filled(&q.since) {
        return clock::parse_time(since)
            .map(Which::Since)
            .ok_or_else(|| bad("since: an RFC 3339 time, a date or unix milliseconds"));
    }
    match filled(&q.last) {
        None => Ok(Which::Last(10)),
        Some(n) => match n.parse::<usize>() {
            Ok(n) if n > 0 => Ok(Which::Last(n)),
            _ => Err(bad("last: a count from 1")),
        },
    }
}

pub(super) async fn page(
    State(st): State<Dashboard>,
    Extension(session): Extension<Session>,
    Path((source, name)): Path<(String, String)>,
    query: Result<Query<TryQuery>, QueryRejection>,
) -> Result<Markup, PageError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request("invalid_filter", e.body_text()))?;
    let which = which(&query)?;
    let tried = trials(&st.admin, &source, &name, which).await?;
    let value = |v: &Option<String>| v.clone().unwrap_or_default();
    let content = html! {
        p {
            "Runs this destination's filter and transform over stored events. "
            "Nothing is sent; secret header values and the signature are not shown."
        }
        form.filters method="get" {
            label { "Event id" input name="event" value=(value(&query.event)); }
            label { "or the last" input name="last" value=(value(&query.last)) placeholder="10"; }
            label { "or since" input name="since" value=(value(&query.since)) placeholder="2026-01-31T12:00:00Z"; }
            button type="submit" { "Try" }
        }
        @if tried.is_empty() { p { "No stored event of " (source) " to try." } }
        @for t in &tried {
            h2 {
                a href={ "/events/" (t.event_id) } { "Event " (t.event_id) }
                " " span.quiet { (t.delivery_id) " · " (t.event_type.as_deref().unwrap_or("no type")) }
            }
            @match (t.outcome, &t.request) {
                ("send", Some(r)) => {
                    p { span.state.delivered { "would send" } }
                    pre {
                        @if let (Some(m), Some(u)) = (r.method, &r.url) { (m) " " (u) "\n" }
                        @if let Some(argv) = &r.argv { "run " (format!("{argv:?}")) "\n" }
                        @for (n, v) in &r.headers { (n) ": " (v) "\n" }
                    }
                    pre { (r.body.as_deref().or(r.body_base64.as_deref()).unwrap_or("")) }
                },
                ("not_matched", _) => p { span.state { "not matched" } " by the destination's filter" },
                ("skipped", _) => p { span.state { "skipped" } " the transform gave no output" },
                (outcome, _) => p.error { (outcome) ": " (t.reason.as_deref().unwrap_or("")) },
            }
        }
    };
    Ok(view::page(
        &format!("Try {source} → {name}"),
        Some(&session.csrf),
        None,
        content,
    ))
}
