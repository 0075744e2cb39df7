//! The dashboard: server-rendered HTML pages on the admin listener.
//!
//! `GET /` (the counts `/api/stats` gives, and per source the traffic
//! charts: inline SVG from the writer's hourly counters, `traffic.rs` and
//! `chart.rs`), `/events` (the inbox, with the API's filters and cursor),
//! `/events/{id}` (headers, body pretty-printed when JSON, attempts),
//! `/events/{id}/raw` (the body's bytes as received),
//! `/dead` (dead letters, a replay button each and "replay all dead"),
//! `/catch-up` (recent runs), `/rejections` (refused requests, explained);
//! `POST /events/{id}/replay`, `POST /replay`.
//! Pages read through [`crate::store::queries`] and replay through the
//! same functions as the API ([`super::events`]), so the writer stays the
//! only thing that writes.
//!
//! Templates are [`maud`]: checked at compile time, and every `(value)`
//! spliced in is HTML-escaped, so a provider-supplied delivery id, event
//! type, header or body shows as text. There is no JavaScript at all; the
//! Content-Security-Policy forbids scripts outright and allows only the
//! one inline style sheet, by its hash.
//!
//! Login, the session cookie and the cross-site checks are in
//! [`session`]; every route but `/login` needs a session (no session: a
//! redirect to `/login`). A session never opens `/api`, which keeps
//! requiring the bearer token.

mod chart;
mod destination;
mod event;
mod pages;
mod pretty;
mod rejections;
mod session;
mod source;
mod traffic;
mod trial;
mod view;

use std::sync::LazyLock;

use axum::Router;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use sha2::{Digest, Sha256};

pub use session::{COOKIE, SESSION_TTL};

use super::{AdminState, TokenDigest};
use crate::support::error::ApiError;
use session::Sessions;

/// What the dashboard's handlers share.
#[derive(Clone)]
struct Dashboard {
    admin: AdminState,
    sessions: Sessions,
    /// The admin token's digest: logging in compares against it.
    token: TokenDigest,
}

/// The dashboard's routes, with their state, ready to merge into the
/// admin router.
pub(super) fn router(admin: AdminState, token: TokenDigest) -> Router {
    let state = Dashboard {
        admin,
        sessions: Sessions::default(),
        token,
    };
    let pages = Router::new()
        .route("/", get(pages::overview))
        .route("/events", get(pages::inbox))
        .route("/events/{id}", get(event::detail))
        .route("/events/{id}/raw", get(event::raw))
        .route("/events/{id}/replay", post(event::replay_one))
        .route("/dead", get(pages::dead))
        .route("/replay", post(event::replay_dead))
        .route("/catch-up", get(pages::catch_up))
        .route("/sources/{name}", get(source::page))
        .route("/rejections", get(rejections::list))
        .route(
            "/destinations/{source}/{name}/{verb}",
            post(destination::pause_or_resume),
        )
        .route("/destinations/{source}/{name}/try", get(trial::page))
        .route("/logout", post(session::logout))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            session::require_session,
        ));
    Router::new()
        .route("/login", get(session::login_form).post(session::login))
        .merge(pages)
        .layer(middleware::map_response(security_headers))
        .with_state(state)
}

/// The dashboard's only style sheet, inlined; the CSP allows it by hash.
const CSS: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}\
header{background:#1d2330;color:#fff;padding:.5rem 1rem;display:flex;gap:1rem;align-items:center}\
header a{color:#cfe0ff;text-decoration:none;margin-right:.8rem}header b{margin-right:1rem}\
header form{margin-left:auto}main{padding:1rem 1.5rem;max-width:80rem}\
table{border-collapse:collapse;width:100%;background:#fff;margin:.5rem 0 1rem}\
th,td{border:1px solid #dde1e8;padding:.3rem .5rem;text-align:left;vertical-align:top}\
th{background:#eef1f5}.n{text-align:right;font-variant-numeric:tabular-nums}\
code,pre{font:12px/1.4 ui-monospace,monospace}pre{background:#fff;border:1px solid #dde1e8;padding:.6rem;white-space:pre-wrap;word-break:break-all;max-height:30rem;overflow:auto}\
.state{padding:0 .35rem;border-radius:3px;background:#e3e7ee}.dead{background:#f8d2d2}.delivered{background:#d3f2da}.pending{background:#fdf0c4}\
.notice{background:#e3f0ff;border:1px solid #9cc2f7;padding:.5rem}.error{background:#fde2e2;border:1px solid #ef9a9a;padding:.5rem}\
form.inline{display:inline}form.filters{display:flex;gap:.6rem;align-items:end;flex-wrap:wrap}\
.paused{color:#8a4b00}\
form.search{display:flex;gap:.6rem;align-items:end;margin-bottom:.8rem}form.search input{min-width:24rem;font-size:14px}\
.charts{display:flex;flex-wrap:wrap;gap:1rem}.chart{background:#fff;border:1px solid #dde1e8;max-width:100%;height:auto}.quiet{font-weight:normal;color:#5b6474}\
label{display:flex;flex-direction:column;font-size:12px}button{cursor:pointer}";

/// `Content-Security-Policy`: nothing but this page's own style sheet,
/// forms that post to this origin only, and no framing.
static CSP: LazyLock<HeaderValue> = LazyLock::new(|| {
    let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(CSS.as_bytes()));
    let policy = format!(
        "default-src 'none'; style-src 'sha256-{hash}'; form-action 'self'; \
         frame-ancestors 'none'; base-uri 'none'"
    );
    HeaderValue::from_str(&policy).expect("the policy is ASCII")
});

/// Adds the security headers to every dashboard response.
async fn security_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, CSP.clone());
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        HeaderName::from_static("cross-origin-opener-policy"),
        HeaderValue::from_static("same-origin"),
    );
    response
}

/// A page that could not be shown: an admin API error, or a refused POST.
enum PageError {
    Api(ApiError),
    /// 403: a POST without the session's CSRF token, or from another site.
    Forbidden(&'static str),
}

impl From<ApiError> for PageError {
    fn from(e: ApiError) -> Self {
        PageError::Api(e)
    }
}

impl From<anyhow::Error> for PageError {
    fn from(e: anyhow::Error) -> Self {
        PageError::Api(ApiError::Internal(e))
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            PageError::Forbidden(why) => (StatusCode::FORBIDDEN, why.to_owned()),
            PageError::Api(ApiError::Internal(e)) => {
                tracing::error!(error = format!("{e:#}"), "a dashboard page failed");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error; the log has the cause".to_owned(),
                )
            }
            PageError::Api(e) => {
                let detail = match &e {
                    ApiError::BadRequest { detail, .. }
                    | ApiError::Conflict { detail, .. }
                    | ApiError::GaveUp { detail, .. } => format!("{}: {detail}", e.reason()),
                    _ => e.reason().to_owned(),
                };
                (e.status(), detail)
            }
        };
        let title = status.canonical_reason().unwrap_or("error");
        (status, view::error_page(title, &message)).into_response()
    }
}
