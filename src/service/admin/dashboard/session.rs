//! Dashboard login, sessions and the checks on every POST.
//!
//! `POST /login` compares the admin token in constant time (the same
//! comparison as the bearer check) and starts a session: 32 random bytes,
//! hex, in the `hookbox_session` cookie (`HttpOnly; SameSite=Strict;
//! Path=/`, no `Secure` because the admin listener is plain HTTP on
//! loopback, reached over an SSH tunnel, and a `Secure` cookie would not
//! come back over `http://`). Sessions live in memory, keyed by the id's
//! SHA-256, for [`SESSION_TTL`]: logging out or restarting hookbox ends
//! them for real, and there is no signing key to keep. Each session has
//! its own random CSRF token.
//!
//! Every POST (login included) is refused with 403 when `Sec-Fetch-Site`
//! or `Origin` says it comes from another site; every POST but login must
//! also carry the session's CSRF token in the `csrf` field, compared in
//! constant time. SameSite=Strict alone would already keep the cookie off
//! cross-site requests; these are the belt to its braces.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{Dashboard, PageError, view};

/// The session cookie's name.
pub const COOKIE: &str = "hookbox_session";

/// How long a session lasts after login.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 60 * 60);

/// Most sessions kept at once; the oldest goes when a login would pass it.
const MAX_SESSIONS: usize = 256;

/// The sessions that exist, by the SHA-256 of their id.
#[derive(Clone, Default)]
pub(super) struct Sessions {
    inner: Arc<Mutex<HashMap<[u8; 32], Entry>>>,
}

struct Entry {
    csrf: String,
    expires: Instant,
}

/// The request's session, as handlers see it.
#[derive(Clone)]
pub(super) struct Session {
    /// Goes in every form's hidden `csrf` field.
    pub csrf: String,
    /// The cookie's value, so logout can end it.
    id: String,
}

fn random_hex() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| anyhow!("reading the OS random number generator: {e}"))?;
    Ok(hex::encode(bytes))
}

fn key(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

impl Sessions {
    fn create(&self) -> anyhow::Result<Session> {
        let session = Session {
            csrf: random_hex()?,
            id: random_hex()?,
        };
        let now = Instant::now();
        let mut map = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|_, e| e.expires > now);
        if map.len() >= MAX_SESSIONS
            && let Some(oldest) = map.iter().min_by_key(|(_, e)| e.expires).map(|(k, _)| *k)
        {
            map.remove(&oldest);
        }
        map.insert(
            key(&session.id),
            Entry {
                csrf: session.csrf.clone(),
                expires: now + SESSION_TTL,
            },
        );
        Ok(session)
    }

    fn get(&self, id: &str) -> Option<Session> {
        let map = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(&key(id))
            .filter(|e| e.expires > Instant::now())
            .map(|e| Session {
                csrf: e.csrf.clone(),
                id: id.to_owned(),
            })
    }

    fn remove(&self, id: &str) {
        let mut map = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        map.remove(&key(id));
    }
}

/// The session cookie's value, if the request has one.
fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// Lets a request through only with a live session, which handlers then
/// take as an `Extension<Session>`; anything else goes to `/login`.
pub(super) async fn require_session(
    State(st): State<Dashboard>,
    mut request: Request,
    next: Next,
) -> Response {
    match cookie(request.headers()).and_then(|id| st.sessions.get(id)) {
        Some(session) => {
            request.extensions_mut().insert(session);
            next.run(request).await
        }
        None => Redirect::to("/login").into_response(),
    }
}

/// Whether `Sec-Fetch-Site` or `Origin` says the request comes from
/// another site. Clients that send neither (curl, scripts) pass here and
/// still need the CSRF token. Under `Referrer-Policy: no-referrer` a
/// browser sends `Origin: null` even for its own forms, so `null` is
/// taken as cross-site only when `Sec-Fetch-Site` does not vouch for the
/// request.
fn cross_site(headers: &HeaderMap) -> bool {
    let fetch_site = headers.get("sec-fetch-site");
    if let Some(site) = fetch_site
        && !matches!(site.as_bytes(), b"same-origin" | b"none")
    {
        return true;
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return false;
    };
    if origin.as_bytes() == b"null" {
        return fetch_site.is_none();
    }
    let Some(host) = headers.get(header::HOST) else {
        return true;
    };
    origin.as_bytes() != [b"http://", host.as_bytes()].concat()
}

/// Refuses a POST from another site, or without the session's CSRF token.
pub(super) fn check_post(
    headers: &HeaderMap,
    session: &Session,
    sent: Option<&str>,
) -> Result<(), PageError> {
    if cross_site(headers) {
        tracing::warn!("refused a cross-site dashboard POST");
        return Err(PageError::Forbidden("cross-site request refused"));
    }
    let sent = sent.unwrap_or("").as_bytes();
    if !bool::from(sent.ct_eq(session.csrf.as_bytes())) {
        tracing::warn!("refused a dashboard POST without the session's CSRF token");
        return Err(PageError::Forbidden(
            "missing or wrong CSRF token; reload the page and try again",
        ));
    }
    Ok(())
}

/// `GET /login`
pub(super) async fn login_form() -> Response {
    view::login(None).into_response()
}

#[derive(Deserialize)]
pub(super) struct LoginForm {
    token: String,
}

/// `POST /login`: with the admin token, a session cookie and `/`.
pub(super) async fn login(
    State(st): State<Dashboard>,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Result<Response, PageError> {
    if cross_site(&headers) {
        return Err(PageError::Forbidden("cross-site request refused"));
    }
    let token = form.map(|Form(f)| f.token).unwrap_or_default();
    if !super::super::token_matches(token.trim().as_bytes(), &st.token) {
        tracing::warn!("dashboard login refused: wrong token");
        let page = view::login(Some("That is not the admin token."));
        return Ok((StatusCode::UNAUTHORIZED, page).into_response());
    }
    let session = st.sessions.create()?;
    tracing::info!("dashboard login");
    let cookie = format!(
        "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        session.id,
        SESSION_TTL.as_secs()
    );
    let mut response = Redirect::to("/").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).map_err(anyhow::Error::from)?,
    );
    Ok(response)
}

#[derive(Deserialize)]
pub(super) struct CsrfForm {
    csrf: Option<String>,
}

/// `POST /logout`: ends the session and clears the cookie.
pub(super) async fn logout(
    State(st): State<Dashboard>,
    axum::Extension(session): axum::Extension<Session>,
    headers: HeaderMap,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Result<Response, PageError> {
    let sent = form.ok().and_then(|Form(f)| f.csrf);
    check_post(&headers, &session, sent.as_deref())?;
    st.sessions.remove(&session.id);
    let mut response = Redirect::to("/login").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&format!(
            "{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"
        ))
        .map_err(anyhow::Error::from)?,
    );
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn only_same_origin_or_header_less_posts_pass_the_site_check() {
        assert!(!cross_site(&headers(&[])));
        assert!(!cross_site(&headers(&[
            ("host", "127.0.0.1:9001"),
            ("origin", "http://127.0.0.1:9001"),
            ("sec-fetch-site", "same-origin"),
        ])));
        assert!(!cross_site(&headers(&[
            ("origin", "null"),
            ("sec-fetch-site", "same-origin"),
        ])));
        for bad in [
            &[("sec-fetch-site", "cross-site")][..],
            &[("sec-fetch-site", "same-site")],
            &[
                ("host", "127.0.0.1:9001"),
                ("origin", "http://evil.example"),
            ],
            &[
                ("host", "127.0.0.1:9001"),
                ("origin", "http://evil.example"),
                ("sec-fetch-site", "same-origin"),
            ],
            &[("host", "127.0.0.1:9001"), ("origin", "null")],
            &[("origin", "http://127.0.0.1:9001")],
        ] {
            assert!(cross_site(&headers(bad)), "{bad:?}");
        }
    }

    #[test]
    fn sessions_are_found_by_their_id_until_removed() {
        let sessions = Sessions::default();
        let s = sessions.create().unwrap();
        assert_eq!(s.id.len(), 64);
        assert_eq!(sessions.get(&s.id).unwrap().csrf, s.csrf);
        assert!(sessions.get("not-a-session").is_none());
        sessions.remove(&s.id);
        assert!(sessions.get(&s.id).is_none());
        let h = headers(&[("cookie", "a=b; hookbox_session=xyz; c=d")]);
        assert_eq!(cookie(&h), Some("xyz"));
    }

    #[test]
    fn a_post_needs_the_sessions_csrf_token() {
        let session = Sessions::default().create().unwrap();
        let h = headers(&[]);
        assert!(check_post(&h, &session, Some(&session.csrf)).is_ok());
        assert!(check_post(&h, &session, None).is_err());
        assert!(check_post(&h, &session, Some("wrong")).is_err());
    }
}
