//! A destination's state on the overview (open, paused by hand or by its
//! breaker, held by a `Retry-After`) and its Pause / Resume button.

use axum::Extension;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::session::{Session, check_post};
use super::view::{csrf_field, time};
use super::{Dashboard, PageError};
use crate::delivery::board::Status;

#[derive(Debug, Default, Deserialize)]
pub(super) struct CsrfForm {
    csrf: Option<String>,
}

/// `POST /destinations/{source}/{name}/pause` and `.../resume`.
pub(super) async fn pause_or_resume(
    State(st): State<Dashboard>,
    Extension(session): Extension<Session>,
    Path((source, name, verb)): Path<(String, String, String)>,
    headers: HeaderMap,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Result<Response, PageError> {
    let csrf = form.ok().and_then(|Form(f)| f.csrf);
    check_post(&headers, &session, csrf.as_deref())?;
    let pause = match verb.as_str() {
        "pause" => true,
        "resume" => false,
        _ => return Err(crate::support::error::ApiError::NotFound("unknown_route").into()),
    };
    crate::service::admin::destinations::set_manual(&st.admin, &source, &name, pause).await?;
    Ok(Redirect::to("/").into_response())
}

/// The state in words, with the button that changes it.
pub(super) fn state(source: &str, name: &str, status: Status, now: i64, csrf: &str) -> Markup {
    let held = status.held_until.filter(|t| *t > now);
    let action = |verb: &str, label: &str| {
        html! {
            form.inline method="post" action={ "/destinations/" (source) "/" (name) "/" (verb) } {
                (csrf_field(csrf))
                button type="submit" { (label) }
            }
        }
    };
    html! {
        @if let Some(since) = status.manual_since {
            span.paused { " paused by hand since " (time(since)) }
            " " (action("resume", "Resume"))
        } @else {
            @if let Some(since) = status.paused_since {
                span.paused {
                    " paused since " (time(since)) " (it kept failing)"
                    @if let Some(at) = status.next_probe_at { "; next probe " (time(at)) }
                }
            } @else if let Some(until) = held {
                span.paused { " held until " (time(until)) " (Retry-After)" }
            }
            " " (action("pause", "Pause"))
        }
    }
}
