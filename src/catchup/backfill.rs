//! What the jobs that fetch missed events and insert them share (Stripe
//! backfill, Square backfill): where a pass starts reading, which listed
//! events the inbox already holds, and inserting the others, oldest first,
//! marked `fetched`.
//!
//! A provider module implements [`Fetch`]: it lists the events it keeps
//! since a time, each as a [`Fetched`] with its inbox key and its body as
//! the provider would have pushed it, and says how the inbox finds the
//! newest event it holds (the body's time field). Everything else is
//! [`run`]'s, so both jobs window, skip, insert and record alike.

use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;

use super::RunCtx;
use crate::config::route::Body;
use crate::store::catchup::{self as tables, TimeField};
use crate::store::models::{Inserted, NewEvent, Origin};
use crate::support::clock;

/// A listed event, as the inbox would store it.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The inbox key: the same the webhook verifier derives from the pushed
    /// body, so a fetched and a pushed copy are one row.
    pub delivery_id: String,
    pub event_type: Option<String>,
    pub order_key: Option<String>,
    /// The body exactly as listed.
    pub body: Bytes,
}

/// How one provider lists the events it keeps.
pub trait Fetch {
    /// Named in log lines.
    const PROVIDER: &'static str;
    /// How far back the provider lists events.
    const MAX_AGE: Duration;
    /// Where a held event's body says when it happened: what the window
    /// starts from.
    const TIME_FIELD: TimeField;

    /// Every event since `start` (unix ms), oldest first, each once.
    async fn list(&self, ctx: &mut RunCtx<'_>, start: i64) -> anyhow::Result<Vec<Fetched>>;
}

/// One pass of a fetching job: reads back to the newest event the inbox
/// holds (or the last successful pass, if older) minus `overlap`, never
/// past the provider's window, and inserts what is missing.
pub async fn run<F: Fetch>(
    ctx: &mut RunCtx<'_>,
    fetch: &F,
    overlap: Duration,
) -> anyhow::Result<()> {
    let start = window_start(ctx, F::TIME_FIELD, overlap, F::MAX_AGE).await?;
    let listed = fetch.list(ctx, start).await?;
    let missing = unheld(ctx, listed).await?;
    insert::<F>(ctx, missing).await?;
    ctx.report.complete = true;
    Ok(())
}

/// The newest held event's time or the last successful pass, whichever is
/// older, minus `overlap`; not before `now - max_age`. When the last
/// successful pass (before any, the newest held event) is older than the
/// provider keeps, what lies between is reported as
/// [`RunReport::uncovered_from`].
///
/// [`RunReport::uncovered_from`]: super::RunReport::uncovered_from
async fn window_start(
    ctx: &mut RunCtx<'_>,
    field: TimeField,
    overlap: Duration,
    max_age: Duration,
) -> anyhow::Result<i64> {
    let floor = ctx.started_at - millis(max_age);
    let (source, job) = (ctx.job.source.clone(), ctx.job.name());
    let (newest, last) = ctx
        .runner
        .db
        .read(move |conn| {
            Ok((
                tables::newest_event_time(conn, &source, field)?,
                tables::last_success(conn, &source, job)?,
            ))
        })
        .await?;
    let newest = newest.map(|s| s.saturating_mul(1000));
    let anchor = match (newest, last) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let wanted = anchor.map(|a| a.saturating_sub(millis(overlap)));
    let start = wanted.unwrap_or(floor).max(floor);
    ctx.report.window_start = Some(start);
    // Unchecked time is what lies before the last successful pass: a
    // quiet account's old newest event is no gap while passes ran. Before
    // any pass, it is what came after the newest event held.
    let unchecked = last.or(newest).map(|a| a.saturating_sub(millis(overlap)));
    ctx.report.uncovered_from = unchecked.filter(|w| *w < floor);
    Ok(start)
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The listed events the inbox lacks, in the order listed; counts the
/// others as held.
async fn unheld(ctx: &mut RunCtx<'_>, listed: Vec<Fetched>) -> anyhow::Result<Vec<Fetched>> {
    let mut seen = HashSet::new();
    let listed: Vec<Fetched> = listed
        .into_iter()
        .filter(|f| seen.insert(f.delivery_id.clone()))
        .collect();
    ctx.report.seen = listed.len() as u32;
    let ids: Vec<String> = listed.iter().map(|f| f.delivery_id.clone()).collect();
    let source = ctx.job.source.clone();
    let held = ctx
        .runner
        .db
        .read(move |conn| tables::held(conn, &source, &ids))
        .await?;
    ctx.report.skipped.held += held.len() as u32;
    Ok(listed
        .into_iter()
        .filter(|f| !held.contains(&f.delivery_id))
        .collect())
}

/// Inserts the missing events in the order given (oldest first), each
/// routed as a pushed one would be.
async fn insert<F: Fetch>(ctx: &mut RunCtx<'_>, missing: Vec<Fetched>) -> anyhow::Result<()> {
    let mut pending = false;
    for m in missing {
        if ctx.dry_run {
            ctx.report.inserted.push(m.delivery_id);
            continue;
        }
        ctx.step().await?;
        let routes = &ctx.job.routes;
        let destinations = routes.matching(
            m.event_type.as_deref(),
            &Body::new(&m.body, routes.reads_body()),
        );
        let dispatched = !destinations.is_empty();
        let event = NewEvent {
            source: ctx.job.source.clone(),
            delivery_id: m.delivery_id.clone(),
            event_type: m.event_type,
            order_key: m.order_key,
            received_at: clock::now_ms(),
            origin: Origin::Fetched,
            content_type: Some("application/json".to_owned()),
            headers: "{}".to_owned(),
            body: m.body,
            destinations,
        };
        match ctx.runner.db.insert(event).await? {
            Inserted::New(id) => {
                tracing::info!(event.id = id, delivery.id = %m.delivery_id, "inserted a missed {} event", F::PROVIDER);
                ctx.report.inserted.push(m.delivery_id);
                pending |= dispatched;
            }
            // Pushed by the provider while this pass ran.
            Inserted::Duplicate(_) => ctx.report.skipped.held += 1,
        }
    }
    if pending {
        ctx.runner.db.wake_dispatch();
    }
    Ok(())
}
