//! The pull API's routes: take (long-poll), ack, nack, release and
//! extend, on the public listener behind each destination's token and on
//! the admin listener behind the admin token.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, header};
use axum::routing::post;
use axum::{Json, Router};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{PullHub, PullLane, Waiting};
use crate::store::StoreError;
use crate::store::deliveries::{self, ClaimFrom, Claimed, Fit, Lease, Release};
use crate::store::pull_leases::{self, PullLease, Pulled, Standing};
use crate::support::clock;
use crate::support::error::ApiError;
use crate::support::excerpt;

/// Most deliveries one take hands out.
pub const MAX_TAKE: usize = 100;

/// Longest a take waits for a delivery.
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// Most leases one ack, nack, release or extend names.
pub const MAX_SETTLE: usize = 1000;

/// The shortest a waiting take sleeps before it claims again for a time
/// the last claim gave, unless woken: a claim goes through the writer, and
/// no schedule is worth more than a few claims a second.
const MIN_LOOK_AGAIN: Duration = Duration::from_millis(100);

pub fn public_routes(hub: Arc<PullHub>) -> Router {
    Router::new()
        .route("/pull/{source}/{destination}", post(public_take))
        .route("/pull/{source}/{destination}/{verb}", post(public_verb))
        .with_state(hub)
}

/// The same routes under `/api/pull`, for the admin listener, which puts
/// them behind the admin token.
pub fn admin_routes(hub: Arc<PullHub>) -> Router {
    Router::new()
        .route("/api/pull/{source}/{destination}", post(admin_take))
        .route("/api/pull/{source}/{destination}/{verb}", post(admin_verb))
        .with_state(hub)
}

/// `?max=&wait=` as sent.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TakeParams {
    max: Option<String>,
    wait: Option<String>,
}

/// A take, parsed.
struct Take {
    max: usize,
    wait: Duration,
}

impl TakeParams {
    fn parse(params: Result<Query<TakeParams>, QueryRejection>) -> Result<Take, ApiError> {
        let Query(p) = params.map_err(|e| ApiError::bad_request("invalid_query", e.body_text()))?;
        let max = match p.max.as_deref() {
            None => 10,
            Some(v) => v
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_TAKE).contains(n))
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "invalid_query",
                        format!("max: a whole number from 1 to {MAX_TAKE}"),
                    )
                })?,
        };
        let wait = match p.wait.as_deref() {
            None => Duration::ZERO,
            Some(v) => v
                .parse::<u64>()
                .map(Duration::from_secs)
                .or_else(|_| humantime::parse_duration(v))
                .ok()
                .filter(|d| *d <= MAX_WAIT)
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "invalid_query",
                        "wait: a duration up to 30s (\"20s\", or seconds: \"20\")",
                    )
                })?,
        };
        Ok(Take { max, wait })
    }
}

/// An ack's or nack's body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SettleBody {
    leases: Vec<String>,
    /// Why the consumer failed (nack only), kept with the attempt.
    #[serde(default)]
    error: Option<String>,
}

/// The lane a public request names, once its client may ask and its token
/// is right. An unknown source or destination, or one that is not pull, is
/// 404; a wrong token 401, counted by the failure limit.
fn admitted(
    hub: &PullHub,
    source: &str,
    destination: &str,
    parts: &axum::http::request::Parts,
) -> Result<(Arc<PullLane>, IpAddr), ApiError> {
    let lane = known_lane(hub, source, destination)?;
    let client = hub.edge.client(source, parts)?;
    hub.edge.admit(source, None, client)?;
    let sent = bearer(&parts.headers).unwrap_or_default();
    if !lane.token_matches(sent) {
        hub.edge.failed(client);
        tracing::debug!(source, destination, "refused a pull with a wrong token");
        return Err(ApiError::Unauthorized);
    }
    Ok((lane, client))
}

/// The pull destination a path names; 404 for an unknown source or
/// destination, or one that is not pull.
fn known_lane(hub: &PullHub, source: &str, destination: &str) -> Result<Arc<PullLane>, ApiError> {
    hub.lane(source, destination)
        .cloned()
        .ok_or(ApiError::NotFound("unknown_destination"))
}

/// The token of `Authorization: Bearer <token>`, if that is what was sent.
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, token) = value.split_first_chunk::<7>()?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| token.trim_ascii())
}

async fn public_take(
    State(hub): State<Arc<PullHub>>,
    Path((source, destination)): Path<(String, String)>,
    params: Result<Query<TakeParams>, QueryRejection>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let (parts, _) = request.into_parts();
    let (lane, client) = admitted(&hub, &source, &destination, &parts)?;
    let take = TakeParams::parse(params)?;
    let waiting = if take.wait.is_zero() {
        None
    } else {
        Some(
            hub.start_waiting(client)
                .ok_or(ApiError::TooManyLongPolls)?,
        )
    };
    take_deliveries(&hub, &lane, take, waiting).await
}

async fn admin_take(
    State(hub): State<Arc<PullHub>>,
    Path((source, destination)): Path<(String, String)>,
    params: Result<Query<TakeParams>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let lane = known_lane(&hub, &source, &destination)?;
    let take = TakeParams::parse(params)?;
    take_deliveries(&hub, &lane, take, None).await
}

/// What a consumer does with leases it holds, as the URL names it.
#[derive(Clone, Copy)]
enum Verb {
    Ack,
    Nack,
    Release,
    Extend,
}

impl Verb {
    fn parse(verb: &str) -> Result<Verb, ApiError> {
        Ok(match verb {
            "ack" => Verb::Ack,
            "nack" => Verb::Nack,
            "release" => Verb::Release,
            "extend" => Verb::Extend,
            _ => return Err(ApiError::NotFound("unknown_route")),
        })
    }
}

async fn public_verb(
    State(hub): State<Arc<PullHub>>,
    Path((source, destination, verb)): Path<(String, String, String)>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let verb = Verb::parse(&verb)?;
    let (parts, body) = request.into_parts();
    let (lane, client) = admitted(&hub, &source, &destination, &parts)?;
    let body = json_body(parts, body).await;
    let (answer, unknown) = on_leases(&hub, &lane, body, verb).await?;
    // A secret of 128 random bits is not found by guessing, so a consumer
    // only names a lease no delivery of its lane has when it makes them
    // up: counted like a wrong token, once per request.
    if unknown > 0 {
        hub.edge.failed(client);
        tracing::debug!(
            source,
            destination,
            unknown,
            "a pull named leases of no delivery of its lane"
        );
    }
    Ok(answer)
}

async fn admin_verb(
    State(hub): State<Arc<PullHub>>,
    Path((source, destination, verb)): Path<(String, String, String)>,
    body: Result<Json<SettleBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let verb = Verb::parse(&verb)?;
    let lane = known_lane(&hub, &source, &destination)?;
    let (answer, _) = on_leases(&hub, &lane, body, verb).await?;
    Ok(answer)
}

/// Reads the JSON body of a request whose parts served its admission.
async fn json_body(
    parts: axum::http::request::Parts,
    body: axum::body::Body,
) -> Result<Json<SettleBody>, JsonRejection> {
    use axum::extract::FromRequest as _;
    Json::from_request(Request::from_parts(parts, body), &()).await
}

fn unavailable(e: StoreError) -> ApiError {
    if !matches!(e, StoreError::Overloaded) {
        tracing::warn!(error = %e, "a pull could not reach the store");
    }
    ApiError::Unavailable
}

/// Claims up to `take.max` due deliveries of `lane`, waiting up to
/// `take.wait` for one; answers them with their bodies.
async fn take_deliveries(
    hub: &PullHub,
    lane: &PullLane,
    take: Take,
    _waiting: Option<Waiting>,
) -> Result<Json<Value>, ApiError> {
    let deadline = Instant::now() + take.wait;
    let timeout_ms = i64::try_from(lane.timeout.as_millis()).unwrap_or(i64::MAX);
    loop {
        // Registered before the claim looks, so an insert between the two
        // still wakes this take.
        let notified = lane.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        // What this take may hand out now: nothing while the destination
        // is paused by hand, what the rate spares otherwise.
        let paused = hub
            .board
            .manual_since(&lane.source, &lane.destination)
            .is_some();
        let allowed = match &lane.rate {
            _ if paused => Err(None),
            None => Ok(take.max),
            Some(bucket) => bucket.take(take.max, Instant::now()).map_err(Some),
        };
        // When to look again without being woken.
        let look_again = match allowed {
            Ok(limit) => {
                let claims = claim(hub, lane, limit, timeout_ms).await;
                let handed = claims.as_ref().map_or(0, |c| c.claimed.len());
                if let Some(bucket) = &lane.rate {
                    bucket.give_back(limit - handed);
                }
                let claims = claims.map_err(unavailable)?;
                hub.alerts
                    .dead_many(&lane.source, &lane.destination, claims.died.len());
                if !claims.claimed.is_empty() {
                    return answer(hub, lane, claims.claimed).await;
                }
                claims.next_due.map(|due| {
                    let ms = u64::try_from(due.saturating_sub(clock::now_ms())).unwrap_or(0);
                    Instant::now() + Duration::from_millis(ms).max(MIN_LOOK_AGAIN)
                })
            }
            Err(next_token) => next_token,
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(none(lane));
        }
        let sleep = look_again.map_or(left, |at| {
            at.saturating_duration_since(Instant::now()).min(left)
        });
        tokio::select! {
            () = &mut notified => {}
            () = tokio::time::sleep(sleep) => {}
            () = hub.shutdown.cancelled() => return Ok(none(lane)),
        }
    }
}

/// Leases up to `limit` due deliveries of `lane` for `timeout_ms`.
async fn claim(
    hub: &PullHub,
    lane: &PullLane,
    limit: usize,
    timeout_ms: i64,
) -> Result<crate::store::deliveries::Claims, StoreError> {
    let now = clock::now_ms();
    let from = ClaimFrom {
        lane: 0,
        source: lane.source.clone(),
        destination: lane.destination.clone(),
        limit,
        max_delay_ms: i64::try_from(lane.rule.cap.as_millis()).unwrap_or(i64::MAX),
        ahead: false,
        on_failure: lane.rule.on_failure(),
        // The answer's own byte limit decides which bodies go (`bodies_within`).
        bodies: 0,
    };
    let lease_until = now.saturating_add(timeout_ms);
    hub.writer
        .write(crate::store::deliveries::Claim {
            lanes: vec![from],
            now,
            lease_until,
            clock_went_back: false,
            renew: Vec::new(),
        })
        .await
}

/// A take's answer with no event.
fn none(lane: &PullLane) -> Json<Value> {
    Json(json!({ "events": [], "lease_ms": lease_ms(lane) }))
}

/// How long each lease a take hands out lasts, in milliseconds.
fn lease_ms(lane: &PullLane) -> u64 {
    u64::try_from(lane.timeout.as_millis()).unwrap_or(u64::MAX)
}

/// Answers as many of the claimed deliveries as fit in the lane's
/// `max_bytes` (one always does), reading their sizes first and then only
/// the bodies that fit, one at a time: a take never holds more than
/// `max_bytes` of bodies, plus the one event that is larger alone. The
/// rest are given back unread.
async fn answer(
    hub: &PullHub,
    lane: &PullLane,
    jobs: Vec<Claimed>,
) -> Result<Json<Value>, ApiError> {
    let ids: Vec<i64> = jobs.iter().map(|j| j.event_id).collect();
    let max_bytes = lane.max_bytes;
    let fits = hub
        .store
        .read(move |conn| deliveries::bodies_within(conn, &ids, max_bytes))
        .await;
    let fits = match fits {
        Ok(fits) => fits,
        Err(e) => return unreadable(hub, jobs, e).await,
    };
    let mut events = Vec::with_capacity(jobs.len());
    let mut rest = Vec::new();
    for (job, fit) in jobs.iter().zip(fits) {
        match fit {
            Fit::Body(body) => events.push(event_json(job, &body)),
            // Deleted since the claim (a purge): its lease went with it.
            Fit::Gone => {}
            Fit::Left => rest.push(job.lease()),
        }
    }
    if !rest.is_empty() {
        release(hub, rest).await;
    }
    Ok(Json(
        json!({ "events": events, "lease_ms": lease_ms(lane) }),
    ))
}

/// A take that could not read what it claimed gives the leases back.
async fn unreadable(
    hub: &PullHub,
    jobs: Vec<Claimed>,
    e: anyhow::Error,
) -> Result<Json<Value>, ApiError> {
    tracing::warn!(error = %format!("{e:#}"), "a pull could not read bodies; giving its leases back");
    release(hub, jobs.iter().map(Claimed::lease).collect()).await;
    Err(ApiError::Unavailable)
}

fn event_json(job: &Claimed, body: &[u8]) -> Value {
    let headers: Value = serde_json::from_str(&job.headers).unwrap_or_else(|_| json!({}));
    json!({
        "id": job.event_id,
        "delivery_id": job.delivery_id,
        "event_type": job.event_type,
        "received_at": job.received_at,
        "content_type": job.content_type,
        "headers": headers,
        "body_base64": base64::engine::general_purpose::STANDARD.encode(body),
        "attempt": job.attempt,
        "lease": PullLease {
            delivery: job.delivery,
            secret: job.secret,
        }
        .to_string(),
    })
}

async fn release(hub: &PullHub, leases: Vec<Lease>) {
    if let Err(e) = hub.writer.write(Release(leases)).await {
        tracing::warn!(error = %e, "cannot give pulled leases back; they run out by themselves");
    }
}

/// The body of an ack, nack, release or extend, and its leases parsed.
fn leases_of(
    body: Result<Json<SettleBody>, JsonRejection>,
) -> Result<(SettleBody, Vec<PullLease>), ApiError> {
    let Json(body) = body.map_err(|e| ApiError::bad_request("invalid_body", e.body_text()))?;
    if body.leases.len() > MAX_SETTLE {
        return Err(ApiError::bad_request(
            "invalid_body",
            format!("leases: at most {MAX_SETTLE} at once"),
        ));
    }
    let leases = body
        .leases
        .iter()
        .enumerate()
        .map(|(i, text)| {
            PullLease::parse(text).ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_body",
                    format!("leases[{i}]: not a lease (as a take answered it)"),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((body, leases))
}

/// Applies `verb` to the leases in `body` that `lane` still holds;
/// answers how many it applied to and which were stale (another lane's,
/// settled, released, superseded or run out: those changed nothing), and
/// how many named no delivery of the lane at all.
async fn on_leases(
    hub: &PullHub,
    lane: &PullLane,
    body: Result<Json<SettleBody>, JsonRejection>,
    verb: Verb,
) -> Result<(Json<Value>, usize), ApiError> {
    let (body, leases) = leases_of(body)?;
    let now = clock::now_ms();
    let (op, key) = match verb {
        Verb::Ack => (pull_leases::Op::Ack, "acked"),
        Verb::Nack => (
            pull_leases::Op::Nack {
                on_failure: lane.rule.on_failure(),
                error: body.error.as_deref().map_or_else(
                    || "nacked by the consumer".to_owned(),
                    |e| excerpt::bytes(e.as_bytes()),
                ),
            },
            "nacked",
        ),
        Verb::Release => (pull_leases::Op::Release, "released"),
        Verb::Extend => (
            pull_leases::Op::Extend {
                lease_until: now.saturating_add(i64::try_from(lease_ms(lane)).unwrap_or(i64::MAX)),
            },
            "extended",
        ),
    };
    let outcome = hub
        .writer
        .write(Pulled {
            source: lane.source.clone(),
            destination: lane.destination.clone(),
            leases,
            op,
            now,
        })
        .await
        .map_err(unavailable)?;
    match verb {
        // The next delivery of a key may be free now, or a retry due.
        Verb::Ack | Verb::Nack => lane.wake.notify_one(),
        Verb::Release => lane.wake.notify_waiters(),
        Verb::Extend => {}
    }
    hub.alerts
        .dead_many(&lane.source, &lane.destination, outcome.died);
    let stale: Vec<&String> = body
        .leases
        .iter()
        .zip(&outcome.standing)
        .filter(|(_, s)| **s != Standing::Held)
        .map(|(text, _)| text)
        .collect();
    let held = outcome
        .standing
        .iter()
        .filter(|s| **s == Standing::Held)
        .count();
    let unknown = outcome
        .standing
        .iter()
        .filter(|s| **s == Standing::Unknown)
        .count();
    Ok((Json(json!({ key: held, "stale": stale })), unknown))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_take_is_bounded() {
        let parse = |max: Option<&str>, wait: Option<&str>| {
            TakeParams::parse(Ok(Query(TakeParams {
                max: max.map(str::to_owned),
                wait: wait.map(str::to_owned),
            })))
        };
        let t = parse(None, None).unwrap();
        assert_eq!((t.max, t.wait), (10, Duration::ZERO));
        let t = parse(Some("100"), Some("30s")).unwrap();
        assert_eq!((t.max, t.wait), (100, MAX_WAIT));
        assert_eq!(
            parse(None, Some("20")).unwrap().wait,
            Duration::from_secs(20)
        );
        for (max, wait) in [
            (Some("0"), None),
            (Some("101"), None),
            (Some("x"), None),
            (None, Some("31s")),
            (None, Some("soon")),
        ] {
            assert!(parse(max, wait).is_err(), "{max:?} {wait:?}");
        }
    }
}
