//! `GET /sources/{name}`: one source's page. Its completeness panel says
//! in one line what the catch-up passes of the last `window` (72 h unless
//! `?window=` says) saw and could not recover, followed by the newest
//! passes of the ledger; the source's events are a link away.

use axum::Extension;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use maud::{Markup, html};
use serde::Deserialize;

use super::session::Session;
use super::view::{self, link, opt_time, time};
use super::{Dashboard, PageError};
use crate::catchup::completeness_line;
use crate::service::admin::completeness::parse_window;
use crate::store::ledger::{self, Entry};
use crate::support::error::ApiError;

/// Passes shown under the panel.
const PASSES: usize = 20;

#[derive(Debug, Default, Deserialize)]
pub(super) struct SourceQuery {
    window: Option<String>,
}

pub(super) async fn page(
    State(st): State<Dashboard>,
    Extension(session): Extension<Session>,
    Path(name): Path<String>,
    query: Result<Query<SourceQuery>, QueryRejection>,
) -> Result<Markup, PageError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request("invalid_query", e.body_text()))?;
    let window = parse_window(query.window.as_deref())?;
    let Some(source) = st.admin.config.source(&name) else {
        return Err(ApiError::NotFound("unknown_source").into());
    };
    let kind = source.kind.as_str();
    let job = st.admin.catchup.job_of(&name);
    let since = crate::support::clock::now_ms() - window.as_millis() as i64;
    let read = name.clone();
    let (summary, passes) = st
        .admin
        .store
        .read(move |c| {
            Ok((
                ledger::summary(c, &read, since)?,
                ledger::recent(c, &read, PASSES)?,
            ))
        })
        .await?;
    let content = html! {
        p {
            "Kind " code { (kind) } ". "
            a href=(link("/events", &[("source", Some(&name))])) { "Its events" } ", "
            a href=(link("/dead", &[("source", Some(&name))])) { "its dead letters" } "."
        }
        h2 { "Completeness" }
        @match job {
            None => p { "No catch-up job: hookbox cannot ask the provider what it sent." }
            Some(job) => {
                p class=(if summary.missing > 0 { "error" } else { "notice" }) role="status" {
                    (completeness_line(&summary, window))
                }
                p.quiet { "From the ledger of " code { (job) } "; " code { "GET /api/sources/" (name) "/completeness" } " has it as JSON." }
                (passes_table(&passes))
            }
        }
    };
    Ok(view::page(
        &format!("Source {name}"),
        Some(&session.csrf),
        None,
        content,
    ))
}

fn passes_table(passes: &[Entry]) -> Markup {
    html! {
        @if passes.is_empty() { p { "No catch-up pass recorded yet." } } @else {
            table {
                tr {
                    th { "Pass" } th { "Window" } th { "Listed" } th { "Held" } th { "Recovered" }
                    th { "Left to the provider" } th { "Missing" } th { "Why" }
                }
                @for e in passes {
                    tr {
                        td { (time(e.window_end)) @if !e.complete { " (incomplete)" } }
                        td {
                            "since " (opt_time(e.window_start))
                            @if let Some(from) = e.uncovered_from { br; "wanted since " (time(from)) }
                        }
                        td.n { (e.listed) } td.n { (e.held) } td.n { (e.recovered) }
                        td.n { (e.pending) } td.n { (e.missing) }
                        td { (e.missing_by.describe()) }
                    }
                }
            }
        }
    }
}
