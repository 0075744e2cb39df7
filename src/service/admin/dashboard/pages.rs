//! The dashboard's list pages: the overview, the inbox, the dead letters
//! and the catch-up runs. Each handler parses its query, reads through
//! [`queries`], and renders with [`view`]; one event's page and the
//! replay actions are in `event.rs`.

use axum::Extension;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use maud::{Markup, html};
use serde::Deserialize;

use super::session::Session;
use super::traffic;
use super::view::{self, csrf_field, excerpt, link, opt_time, state, time};
use super::{Dashboard, PageError};
use crate::service::admin::DEFAULT_LIMIT;
use crate::store::counters;
use crate::store::models;
use crate::store::queries::{self, EventFilter, EventPage, EventSummary};
use crate::support::error::ApiError;

/// Longest error excerpt in a table cell.
pub(super) const MAX_EXCERPT: usize = 120;

/// `GET /`: the counts `/api/stats` gives, each source's traffic charts,
/// and each job's last catch-up run.
pub(super) async fn overview(
    State(st): State<Dashboard>,
    Extension(session): Extension<Session>,
) -> Result<Markup, PageError> {
    let crate::service::admin::stats::Overview {
        sources,
        totals,
        oldest_pending_age_seconds: oldest,
        last_runs,
    } = crate::service::admin::stats::overview(&st.admin).await?;
    let age = |a: Option<f64>| a.map(|a| format!("{a:.0} s")).unwrap_or_else(|| "-".into());
    // Read on this thread: the read below runs on another.
    let now = crate::support::clock::now_ms();
    let since = traffic::since(now);
    let counts = st
        .admin
        .store
        .read(move |c| counters::since(c, since))
        .await?;
    let configured: Vec<String> = st
        .admin
        .config
        .sources
        .iter()
        .map(|s| s.name.clone())
        .collect();
    let traffic = traffic::bucket(now, &counts, &configured);
    let content = html! {
        table {
            tr { th { "Source" } @for s in models::State::ALL { th { (s) } } th { "Oldest pending" } }
            @for s in &sources {
                tr {
                    td {
                        a href=(link("/events", &[("source", Some(&s.source))])) { (s.source) }
                        " " a.quiet href={ "/sources/" (s.source) } { "(source)" }
                    }
                    @for state in models::State::ALL {
                        td.n {
                            a href=(link("/events", &[("source", Some(&s.source)), ("state", Some(state.as_str()))])) {
                                (s.counts.get(state.as_str()).copied().unwrap_or(0))
                            }
                        }
                    }
                    td.n { (age(s.oldest_pending_age_seconds)) }
                }
                // Each destination's deliveries, under its source.
                @for (name, d) in &s.destinations {
                    tr.destination {
                        td {
                            "↳ "
                            a href=(link("/events", &[("source", Some(&s.source)), ("destination", Some(name))])) { (name) }
                            @if let Some(c) = st.admin.config.source(&s.source).and_then(|c| c.destinations.iter().find(|c| &c.name == name)) {
                                span.target { " " (c.destination.kind()) ": " (c.destination.target()) }
                            }
                            @if !d.configured { " (not in the config)" }
                            @else {
                                (super::destination::state(&s.source, name,
                                    st.admin.board.get(&s.source, name), now, &session.csrf))
                                " " a href={ "/destinations/" (s.source) "/" (name) "/try" } { "Try" }
                            }
                        }
                        @for (state, n) in [(models::State::Pending, d.pending), (models::State::Delivered, d.delivered), (models::State::Dead, d.dead), (models::State::Skipped, d.skipped)] {
                            td.n {
                                a href=(link(
                                    if state == models::State::Dead { "/dead" } else { "/events" },
                                    &[("source", Some(&s.source)), ("destination", Some(name)),
                                      ("state", Some(state.as_str()).filter(|_| state != models::State::Dead))],
                                )) { (n) }
                            }
                        }
                        td.n { "-" }
                        td.n { (age(d.oldest_pending_at.map(|at| (now - at).max(0) as f64 / 1000.0))) }
                    }
                }
            }
            tr {
                th { "All" }
                @for state in models::State::ALL { th.n { (totals.get(state.as_str()).copied().unwrap_or(0)) } }
                th.n { (age(oldest)) }
            }
        }
        p { "Events count once per source; the rows marked ↳ count each destination's deliveries." }
        (traffic::section(&traffic, &configured))
        h2 { "Last catch-up run of each job" }
        (runs_table(&last_runs))
    };
    Ok(view::page("Overview", Some(&session.csrf), None, content))
}

/// The inbox's and dead letters' query string.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ListQuery {
    source: Option<String>,
    destination: Option<String>,
    state: Option<String>,
    event_type: Option<String>,
    before: Option<String>,
    /// The search box: words (and `prefix*`) the body must have.
    q: Option<String>,
    /// Set after a replay, to say how many moved.
    replayed: Option<String>,
}

impl ListQuery {
    /// The API's filter, one page of [`DEFAULT_LIMIT`]; empty fields are unset.
    fn filter(&self, st: &Dashboard) -> Result<EventFilter, ApiError> {
        let set = |v: &Option<String>| v.clone().filter(|v| !v.trim().is_empty());
        let q = set(&self.q)
            .map(|q| st.admin.search_query(&q))
            .transpose()?;
        let destination = set(&self.destination);
        let state =
            crate::service::admin::parse_state(set(&self.state).as_deref(), destination.is_some())?;
        let before = match set(&self.before) {
            None => None,
            Some(v) => Some(v.parse::<i64>().ok().filter(|id| *id > 0).ok_or_else(|| {
                ApiError::bad_request("invalid_filter", "before: must be an event id")
            })?),
        };
        Ok(EventFilter {
            source: set(&self.source),
            destination,
            state,
            event_type: set(&self.event_type),
            before,
            q,
            limit: DEFAULT_LIMIT,
            ..EventFilter::default()
        })
    }
}

pub(super) fn parse_query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(q)| q)
        .map_err(|e| ApiError::bad_request("invalid_filter", e.body_text()))
}

async fn list(st: &Dashboard, filter: EventFilter) -> Result<EventPage, PageError> {
    Ok(crate::service::admin::list_events(&st.admin.store, filter).await?)
}

/// `GET /events`: the inbox, newest first, filtered like `/api/events`.
pub(super) async fn inbox(
    State(st): State<Dashboard>,
    Extension(session): Extension<Session>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Markup, PageError> {
    let query = parse_query(query)?;
    let filter = query.filter(&st)?;
    let q = query.q.as_deref().filter(|q| !q.trim().is_empty());
    let page = list(&st, filter.clone()).await?;
    let content = html! {
        @if st.admin.config.search.enabled {
            form.search method="get" action="/events" role="search" {
                label { "Search bodies"
                    input type="search" name="q" value=[q] placeholder="words or prefix*";
                }
                // The other filters stay as chosen below.
                @if let Some(v) = &filter.source { input type="hidden" name="source" value=(v); }
                @if let Some(v) = &filter.destination { input type="hidden" name="destination" value=(v); }
                @if let Some(v) = &filter.state { input type="hidden" name="state" value=(v); }
                @if let Some(v) = &filter.event_type { input type="hidden" name="event_type" value=(v); }
                button type="submit" { "Search" }
            }
        }
        form.filters method="get" action="/events" {
            (source_select(&st, filter.source.as_deref()))
            (destination_select(&st, filter.destination.as_deref()))
            label { "State"
                select name="state" {
                    option value="" { "any" }
                    @for s in models::State::ALL { option value=(s) selected[filter.state == Some(s)] { (s) } }
                }
            }
            label { "Event type" input type="text" name="event_type" value=[filter.event_type.as_deref()]; }
            @if let Some(q) = q { input type="hidden" name="q" value=(q); }
            button type="submit" { "Filter" }
        }
        @if let Some(d) = &filter.destination {
            p { "Events with a delivery at " b { (d) } "; state, attempts and last error are that delivery's." }
        }
        @if let Some(q) = q {
            p.found {
                @if page.events.is_empty() { "No event" } @else { "Events" }
                " whose body has " b { (q) } ". "
                a href=(link("/events", &[("source", filter.source.as_deref()), ("destination", filter.destination.as_deref()), ("state", filter.state.map(models::State::as_str)), ("event_type", filter.event_type.as_deref())])) { "Clear the search" }
            }
            @if let Some(c) = page.search.filter(|c| c.not_yet_indexed > 0) {
                p.lag {
                    "The search index has events up to #" (c.indexed_through) "; the "
                    (c.not_yet_indexed) " stored after it were not searched yet."
                }
            }
        }
        (events_table(&page.events, None))
        (older_link("/events", &filter, q, page.next_before))
    };
    Ok(view::page("Inbox", Some(&session.csrf), None, content))
}

/// `GET /dead`: dead letters with a replay button each, and one for all.
/// Without a destination, events that are dead (a delivery dead, none
/// pending); with one, the events whose delivery there is dead.
pub(super) async fn dead(
    State(st): State<Dashboard>,
    Extension(session): Extension<Session>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Markup, PageError> {
    let query = parse_query(query)?;
    let mut filter = query.filter(&st)?;
    filter.state = Some(models::State::Dead);
    let notice = query
        .replayed
        .as_deref()
        .and_then(|n| n.parse::<usize>().ok())
        .map(|n| format!("Replayed {n} delivery(s): back to pending, to be delivered shortly."));
    let page = list(&st, filter.clone()).await?;
    let source = filter.source.as_deref();
    let destination = filter.destination.as_deref();
    let content = html! {
        form.filters method="get" action="/dead" {
            (source_select(&st, source))
            (destination_select(&st, destination))
            button type="submit" { "Filter" }
        }
        form.inline method="post" action="/replay" {
            (csrf_field(&session.csrf))
            @if let Some(source) = source { input type="hidden" name="source" value=(source); }
            @if let Some(d) = destination { input type="hidden" name="destination" value=(d); }
            button type="submit" {
                "Replay all dead"
                @if let Some(source) = source { " of " (source) }
                @if let Some(d) = destination { " at " (d) }
                @if source.is_none() && destination.is_none() { " (every source)" }
            }
        }
        (events_table(&page.events, Some(&session.csrf)))
        (older_link("/dead", &filter, query.q.as_deref(), page.next_before))
    };
    Ok(view::page(
        "Dead letters",
        Some(&session.csrf),
        notice.as_deref(),
        content,
    ))
}

fn source_select(st: &Dashboard, chosen: Option<&str>) -> Markup {
    html! {
        label { "Source"
            select name="source" {
                option value="" { "any" }
                @for s in &st.admin.config.sources {
                    option value=(s.name) selected[chosen == Some(s.name.as_str())] { (s.name) }
                }
            }
        }
    }
}

/// Every destination name of the config (a name may be in several sources).
fn destination_select(st: &Dashboard, chosen: Option<&str>) -> Markup {
    let names: std::collections::BTreeSet<&str> = st
        .admin
        .config
        .sources
        .iter()
        .flat_map(|s| s.destinations.iter().map(|d| d.name.as_str()))
        .chain(chosen)
        .collect();
    html! {
        label { "Destination"
            select name="destination" {
                option value="" { "any" }
                @for name in names {
                    option value=(name) selected[chosen == Some(name)] { (name) }
                }
            }
        }
    }
}

fn older_link(path: &str, f: &EventFilter, q: Option<&str>, next: Option<i64>) -> Markup {
    let Some(next) = next else {
        return html! {};
    };
    let next = next.to_string();
    let href = link(
        path,
        &[
            ("source", f.source.as_deref()),
            ("destination", f.destination.as_deref()),
            (
                "state",
                f.state
                    .map(models::State::as_str)
                    .filter(|_| path == "/events"),
            ),
            ("event_type", f.event_type.as_deref()),
            ("q", q.filter(|q| !q.trim().is_empty())),
            ("before", Some(&next)),
        ],
    );
    html! { p { a href=(href) { "Older →" } } }
}

/// Events as table rows; with `csrf`, each row gets a replay button. A
/// row listed for a destination filter shows that delivery's state,
/// attempts and last error, and its button replays that delivery.
fn events_table(events: &[EventSummary], csrf: Option<&str>) -> Markup {
    html! {
        @if events.is_empty() {
            p { "No events." }
        } @else {
            table {
                tr {
                    th { "Id" } th { "Received" } th { "Source" } th { "Event type" }
                    th { "Delivery id" } th { "State" } th { "Attempts" } th { "Last error" }
                    @if csrf.is_some() { th {} }
                }
                @for e in events {
                    @let (shown_state, attempts, last_error) = match &e.delivery {
                        Some(d) => (d.state, d.attempts, &d.last_error),
                        None => (e.state, e.attempts, &e.last_error),
                    };
                    tr {
                        td.n { a href={ "/events/" (e.id) } { (e.id) } }
                        td { (time(e.received_at)) }
                        td { (e.source) }
                        td { (e.event_type.as_deref().unwrap_or("-")) }
                        td { code { (excerpt(&e.delivery_id, 60)) } }
                        td {
                            (state(shown_state))
                            @if let Some(d) = &e.delivery { " at " (d.destination) }
                        }
                        td.n { (attempts) }
                        td { (excerpt(last_error.as_deref().unwrap_or(""), MAX_EXCERPT)) }
                        @if let Some(csrf) = csrf {
                            td {
                                (replay_button(
                                    e.id,
                                    e.delivery.as_ref().map(|d| d.destination.as_str()),
                                    "Replay",
                                    csrf,
                                ))
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A button that replays event `id`: at `destination` only, or every
/// dead, delivered or skipped delivery of it.
pub(super) fn replay_button(id: i64, destination: Option<&str>, label: &str, csrf: &str) -> Markup {
    html! {
        form.inline method="post" action={ "/events/" (id) "/replay" } {
            (csrf_field(csrf))
            @if let Some(d) = destination { input type="hidden" name="destination" value=(d); }
            button type="submit" { (label) }
        }
    }
}

/// `GET /catch-up`: the newest catch-up runs.
pub(super) async fn catch_up(
    State(st): State<Dashboard>,
    Extension(session): Extension<Session>,
) -> Result<Markup, PageError> {
    let runs = st
        .admin
        .store
        .read(move |c| queries::catchup_runs(c, None, DEFAULT_LIMIT))
        .await?;
    Ok(view::page(
        "Catch-up runs",
        Some(&session.csrf),
        None,
        runs_table(&runs),
    ))
}

fn runs_table(runs: &[queries::CatchupRun]) -> Markup {
    html! {
        @if runs.is_empty() { p { "No catch-up runs yet." } } @else {
            table {
                tr {
                    th { "Source" } th { "Job" } th { "Started" } th { "Finished" } th { "Pages" }
                    th { "Seen" } th { "Asked" } th { "Failed" } th { "Complete" } th { "Error" }
                }
                @for r in runs {
                    tr {
                        td { a href={ "/sources/" (r.source) } { (r.source) } }
                        td { (r.job) @if r.dry_run { " (dry run)" } }
                        td { (time(r.started_at)) } td { (opt_time(r.finished_at)) }
                        td.n { (r.pages) } td.n { (r.seen) } td.n { (r.asked) } td.n { (r.failed) }
                        td { @if r.complete { "yes" } @else { "no" } }
                        td { (excerpt(r.error.as_deref().unwrap_or(""), MAX_EXCERPT)) }
                    }
                }
            }
        }
    }
}
