//! One event's page (`GET /events/{id}`: a JSON body indented, the raw
//! bytes at `GET /events/{id}/raw`) and the replay actions
//! (`POST /events/{id}/replay`, `POST /replay`), which go through the
//! same functions as the API's replay, and so through the writer.
//!
//! The event page lists the event's deliveries, one row per destination,
//! each with its own replay button, and a "deliver here" button for each
//! configured destination the event never went to.

use axum::extract::rejection::{FormRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use maud::{Markup, html};
use serde::Deserialize;

use super::pages::{MAX_EXCERPT, parse_query, replay_button};
use super::pretty::pretty_json;
use super::session::{Session, check_post};
use super::view::{self, excerpt, link, opt_time, state, time};
use super::{Dashboard, PageError};
use crate::service::admin::events;
use crate::store::models;
use crate::store::queries::{self, DeliveryRow};
use crate::support::error::ApiError;

#[derive(Debug, Deserialize)]
pub(super) struct DetailQuery {
    replayed: Option<String>,
}

/// `GET /events/{id}`: one event with its headers, body and attempts.
pub(super) async fn detail(
    State(st): State<Dashboard>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    query: Result<Query<DetailQuery>, QueryRejection>,
) -> Result<Markup, PageError> {
    let id = parse_id(&id)?;
    let replayed = parse_query(query)?.replayed.is_some();
    let d = st
        .admin
        .store
        .read(move |c| queries::event_detail(c, id))
        .await?
        .ok_or(ApiError::NotFound("unknown_event"))?;
    let e = &d.summary;
    let configured = st.admin.destinations(&e.source);
    let has_body = d.body.is_some();
    // As the replay itself decides (`delivery::replay`): only deliveries at
    // configured destinations move, and an emptied body cannot be
    // delivered again.
    let replayable = |row: &DeliveryRow| {
        has_body
            && configured.contains(&row.destination)
            && matches!(
                row.state,
                models::State::Dead | models::State::Delivered | models::State::Skipped
            )
    };
    let any_replayable = d.deliveries.iter().any(replayable);
    let never: Vec<&String> = configured
        .iter()
        .filter(|name| !d.deliveries.iter().any(|row| &row.destination == *name))
        .collect();
    let headers: Vec<(String, String)> = match &d.headers {
        serde_json::Value::Object(map) => map
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.as_str().map_or_else(|| v.to_string(), str::to_owned),
                )
            })
            .collect(),
        other => vec![("(unparsed)".to_owned(), other.to_string())],
    };
    let content = html! {
        table {
            tr { th { "Source" } td { (e.source) } }
            tr { th { "Delivery id" } td { code { (e.delivery_id) } } }
            tr { th { "Event type" } td { (e.event_type.as_deref().unwrap_or("-")) } }
            tr { th { "State" } td { (state(e.state)) } }
            tr { th { "Received" } td { (time(e.received_at)) " (via " (e.origin) ")" } }
            tr { th { "Attempts" } td { (e.attempts) } }
            tr { th { "Next attempt" } td {
                @if e.state == models::State::Pending && e.next_attempt_at.is_none() {
                    "after the older pending event of its order key"
                } @else { (opt_time(e.next_attempt_at)) }
            } }
            tr { th { "Delivered" } td { (opt_time(e.delivered_at)) } }
            tr { th { "Order key" } td { (d.order_key.as_deref().unwrap_or("-")) } }
            tr { th { "Last error" } td { (e.last_error.as_deref().unwrap_or("-")) } }
        }
        @if any_replayable { (replay_button(e.id, None, "Replay every dead, delivered or skipped delivery", &session.csrf)) }
        h2 { "Deliveries" }
        @if d.deliveries.is_empty() && never.is_empty() {
            p { "None: the source has no destination." }
        } @else {
            table {
                tr {
                    th { "Destination" } th { "State" } th { "Attempts" } th { "Next attempt" }
                    th { "Delivered" } th { "Last error" } th {}
                }
                @for row in &d.deliveries {
                    tr {
                        td {
                            (row.destination)
                            @if !configured.contains(&row.destination) { " (not in the config: kept, not dispatched)" }
                        }
                        td { (state(row.state)) }
                        td.n { (row.attempts) }
                        td {
                            @if row.state == models::State::Pending && row.next_attempt_at.is_none() {
                                "after the older pending event of its order key"
                            } @else { (opt_time(row.next_attempt_at)) }
                        }
                        td { (opt_time(row.delivered_at)) }
                        td { (excerpt(row.last_error.as_deref().unwrap_or(""), MAX_EXCERPT)) }
                        td {
                            @if replayable(row) {
                                (replay_button(e.id, Some(&row.destination), "Replay", &session.csrf))
                            }
                        }
                    }
                }
                @for name in &never {
                    tr {
                        td { (name) }
                        td { "none: never sent there (its filter did not take the event, or the destination came later)" }
                        td.n { "0" } td { "-" } td { "-" } td {}
                        td {
                            @if has_body {
                                (replay_button(e.id, Some(name), "Deliver here", &session.csrf))
                            }
                        }
                    }
                }
            }
        }
        h2 { "Headers" }
        table {
            @for (name, value) in &headers { tr { th { code { (name) } } td { code { (value) } } } }
        }
        h2 { "Body" }
        @match &d.body {
            None => p { "Dropped by retention (retention.body_days); the event can no longer be replayed." },
            Some(bytes) => @match std::str::from_utf8(bytes) {
                Ok(text) => {
                    @let pretty = pretty_json(text);
                    p {
                        (d.content_type.as_deref().unwrap_or("no content type")) ", " (bytes.len()) " bytes"
                        @if pretty.is_some() { ", JSON shown indented" }
                        " · " a.raw href={ "/events/" (id) "/raw" } { "raw bytes, exactly as received" }
                    }
                    pre.body { (pretty.as_deref().unwrap_or(text)) }
                },
                Err(_) => p {
                    "binary, " (bytes.len()) " bytes · "
                    a.raw href={ "/events/" (id) "/raw" } { "download the raw bytes" }
                },
            },
        }
        h2 { "Attempts" }
        @if d.attempts.is_empty() { p { "None yet." } } @else {
            table {
                tr {
                    th { "Destination" } th { "#" } th { "Started" } th { "Duration" } th { "Outcome" }
                    th { "Status" } th { "Error" }
                }
                @for a in &d.attempts {
                    tr {
                        td { (a.destination) }
                        td.n { (a.attempt) } td { (time(a.started_at)) } td.n { (a.duration_ms) " ms" }
                        td { (a.outcome) } td.n { (a.status_code.map(|s| s.to_string()).unwrap_or_default()) }
                        td { (excerpt(a.error.as_deref().unwrap_or(""), MAX_EXCERPT)) }
                    }
                }
            }
        }
    };
    let notice = replayed
        .then_some("Replayed: the delivery is back to pending and will be delivered shortly.");
    Ok(view::page(
        &format!("Event {id}"),
        Some(&session.csrf),
        notice,
        content,
    ))
}

/// `GET /events/{id}/raw`: the body's bytes exactly as received: as
/// plain text when UTF-8 (the security headers' `nosniff` keeps a browser
/// from reading it as anything else), else as a download.
pub(super) async fn raw(
    State(st): State<Dashboard>,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let id = parse_id(&id)?;
    let body = st
        .admin
        .store
        .read(move |c| queries::event_body(c, id))
        .await?
        .ok_or(ApiError::NotFound("unknown_event"))?
        .ok_or(ApiError::NotFound("body_dropped"))?;
    let headers = if std::str::from_utf8(&body).is_ok() {
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8".to_owned()),
            (header::CONTENT_DISPOSITION, "inline".to_owned()),
        ]
    } else {
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"event-{id}.bin\""),
            ),
        ]
    };
    Ok((headers, body).into_response())
}

fn parse_id(id: &str) -> Result<i64, ApiError> {
    id.parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or(ApiError::NotFound("unknown_event"))
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct ReplayForm {
    csrf: Option<String>,
    source: Option<String>,
    /// Only the delivery there (created if the event never had one).
    destination: Option<String>,
}

fn form_fields(form: Result<Form<ReplayForm>, FormRejection>) -> ReplayForm {
    form.map(|Form(f)| f).unwrap_or_default()
}

/// `POST /events/{id}/replay`: replays one event, then shows it.
pub(super) async fn replay_one(
    State(st): State<Dashboard>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    headers: HeaderMap,
    form: Result<Form<ReplayForm>, FormRejection>,
) -> Result<Response, PageError> {
    let form = form_fields(form);
    check_post(&headers, &session, form.csrf.as_deref())?;
    let id = parse_id(&id)?;
    let destination = form.destination.filter(|d| !d.is_empty());
    events::replay_event(&st.admin, id, destination.as_deref()).await?;
    Ok(Redirect::to(&format!("/events/{id}?replayed=1")).into_response())
}

/// `POST /replay`: replays every dead delivery (of `source`, at
/// `destination`, if given).
pub(super) async fn replay_dead(
    State(st): State<Dashboard>,
    Extension(session): Extension<Session>,
    headers: HeaderMap,
    form: Result<Form<ReplayForm>, FormRejection>,
) -> Result<Response, PageError> {
    let form = form_fields(form);
    check_post(&headers, &session, form.csrf.as_deref())?;
    let source = form.source.filter(|s| !s.is_empty());
    let destination = form.destination.filter(|d| !d.is_empty());
    let bulk = events::Bulk::new(
        Some(models::State::Dead),
        source.clone(),
        destination.clone(),
        None,
        None,
    )
    .map_err(|e| ApiError::bad_request("invalid_body", e.to_string()))?;
    let n = events::replay_matching(&st.admin, bulk).await?.to_string();
    let to = link(
        "/dead",
        &[
            ("source", source.as_deref()),
            ("destination", destination.as_deref()),
            ("replayed", Some(&n)),
        ],
    );
    Ok(Redirect::to(&to).into_response())
}
