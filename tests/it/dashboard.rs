//! The dashboard over plain HTTP: login and the session cookie, escaping
//! of provider-supplied text, the CSRF and cross-site checks on replay,
//! and that a session never opens `/api`. `dashboard/browser.rs` does the
//! same things in headless Chromium.

pub mod browser;

use reqwest::header::{HeaderMap, LOCATION, SET_COOKIE};
use reqwest::redirect::Policy;

use crate::helpers::*;

pub const SCRIPT: &str = "<script>alert(1)</script>";

/// `RequestBuilder::form` without reqwest's `form` feature.
trait FormBody {
    fn form<K: AsRef<str>, V: AsRef<str>>(self, pairs: &[(K, V)]) -> Self;
}

impl FormBody for reqwest::RequestBuilder {
    fn form<K: AsRef<str>, V: AsRef<str>>(self, pairs: &[(K, V)]) -> Self {
        let encode = |s: &str| {
            s.bytes()
                .map(|b| match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                        (b as char).to_string()
                    }
                    _ => format!("%{b:02X}"),
                })
                .collect::<String>()
        };
        let body: Vec<String> = pairs
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k.as_ref()), encode(v.as_ref())))
            .collect();
        self.header("content-type", "application/x-www-form-urlencoded")
            .body(body.join("&"))
    }
}

/// A client that shows redirects instead of following them.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .build()
        .unwrap()
}

/// A logged-in session: its cookie header and CSRF token.
pub struct Login {
    pub cookie: String,
    pub csrf: String,
}

pub async fn login(app: &TestApp) -> Login {
    let r = client()
        .post(app.admin_url("/login"))
        .form(&[("token", ADMIN_TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let set = r.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    let cookie = set.split(';').next().unwrap().to_owned();
    let page = get(app, "/", &cookie).await;
    let csrf = csrf_of(&page);
    Login { cookie, csrf }
}

fn csrf_of(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("a csrf field") + 19;
    page[at..].split('"').next().unwrap().to_owned()
}

/// The HTML of `path`, which must answer 200.
pub async fn get(app: &TestApp, path: &str, cookie: &str) -> String {
    let r = client()
        .get(app.admin_url(path))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{path}");
    assert_security_headers(r.headers());
    r.text().await.unwrap()
}

fn assert_security_headers(h: &HeaderMap) {
    let csp = h["content-security-policy"].to_str().unwrap();
    for part in [
        "default-src 'none'",
        "style-src 'sha256-",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(part), "{csp}");
    }
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["referrer-policy"], "no-referrer");
}

#[tokio::test]
async fn every_page_redirects_to_login_without_a_session() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    let c = client();
    for path in [
        "/",
        "/events",
        "/events/1",
        "/events/1/raw",
        "/dead",
        "/catch-up",
        "/sources/github",
    ] {
        for cookie in ["", "hookbox_session=0123456789abcdef"] {
            let r = c
                .get(app.admin_url(path))
                .header("cookie", cookie)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 303, "{path}");
            assert_eq!(r.headers()[LOCATION], "/login", "{path}");
            assert_security_headers(r.headers());
        }
    }
    for path in ["/replay", "/events/1/replay", "/logout"] {
        let r = c.post(app.admin_url(path)).send().await.unwrap();
        assert_eq!(r.headers()[LOCATION], "/login", "{path}");
    }
    let r = c.get(app.admin_url("/login")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_security_headers(r.headers());
    assert!(r.text().await.unwrap().contains("name=\"token\""));
    app.shutdown().await;
}

#[tokio::test]
async fn only_the_admin_token_logs_in_and_the_cookie_is_httponly_and_samesite_strict() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    let c = client();
    for wrong in ["", "wrong-token-wrong-token", &format!("{ADMIN_TOKEN}x")] {
        let r = c
            .post(app.admin_url("/login"))
            .form(&[("token", wrong)])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{wrong}");
        assert!(r.headers().get(SET_COOKIE).is_none());
    }
    // Logging in from another site is refused, right token or not.
    let r = c
        .post(app.admin_url("/login"))
        .header("origin", "http://evil.example")
        .form(&[("token", ADMIN_TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);

    let r = c
        .post(app.admin_url("/login"))
        .form(&[("token", ADMIN_TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()[LOCATION], "/");
    let set = r.headers()[SET_COOKIE].to_str().unwrap();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attribute), "{set}");
    }
    assert!(set.starts_with("hookbox_session="), "{set}");
    let cookie = set.split(';').next().unwrap().to_owned();
    let page = get(&app, "/", &cookie).await;
    assert!(page.contains("<h1>Overview</h1>"), "{page}");
    for path in ["/events", "/dead", "/catch-up"] {
        get(&app, path, &cookie).await;
    }

    // Logout needs the CSRF token too, then the cookie is worthless.
    let r = c
        .post(app.admin_url("/logout"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = c
        .post(app.admin_url("/logout"))
        .header("cookie", &cookie)
        .form(&[("csrf", csrf_of(&page))])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert!(
        r.headers()[SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    let r = c
        .get(app.admin_url("/"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()[LOCATION], "/login");
    app.shutdown().await;
}

/// Posts a GitHub delivery whose delivery id, event type, headers and body
/// all carry [`SCRIPT`]; returns its id.
pub async fn post_script_event(app: &TestApp, source: &str) -> i64 {
    let body = format!(r#"{{"comment":"{SCRIPT}"}}"#);
    let r = app
        .client
        .post(app.url(&format!("/hooks/{source}")))
        .header("content-type", "application/json")
        .header("x-github-event", SCRIPT)
        .header("x-github-delivery", SCRIPT)
        .header("x-github-hook-id", SCRIPT)
        .header("user-agent", SCRIPT)
        .header(
            "x-hub-signature-256",
            github_signature(GITHUB_SECRET, body.as_bytes()),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    json(r).await["id"].as_i64().unwrap()
}

#[tokio::test]
async fn provider_supplied_text_renders_escaped() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    let id = post_script_event(&app, "github").await;
    let session = login(&app).await;
    for path in [
        format!("/events/{id}"),
        "/events".to_owned(),
        "/events?event_type=%3Cscript%3Ealert(1)%3C%2Fscript%3E".to_owned(),
    ] {
        let page = get(&app, &path, &session.cookie).await;
        assert!(!page.contains("<script"), "{path}: {page}");
        assert!(
            page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{path}"
        );
    }
    let page = get(&app, &format!("/events/{id}"), &session.cookie).await;
    // Delivery id, event type, three headers and the body.
    assert!(page.matches("&lt;script&gt;").count() >= 6, "{page}");
    app.shutdown().await;
}

#[tokio::test]
async fn replay_needs_the_csrf_token_and_a_same_site_request() {
    let down = Downstream::start(|_, _| Reply::status(410)).await;
    let app = TestApp::spawn(&deliver_source(
        "github",
        &url_destination(&down.url()),
        "5s",
        3,
    ))
    .await;
    let one = json(app.post_github("one", b"{}").await).await["id"]
        .as_i64()
        .unwrap();
    let two = json(app.post_github("two", b"{}").await).await["id"]
        .as_i64()
        .unwrap();
    for id in [one, two] {
        wait_for_state(&app.db_path, id, "dead").await;
    }
    down.set_script(|_, _| Reply::status(204));
    let session = login(&app).await;
    let dead = get(&app, "/dead", &session.cookie).await;
    assert!(
        dead.contains(&format!("action=\"/events/{one}/replay\"")),
        "{dead}"
    );

    let c = client();
    let url = app.admin_url(&format!("/events/{one}/replay"));
    let same_origin = format!("http://{}", app.admin_addr);
    let refused = [
        c.post(&url).header("cookie", &session.cookie),
        c.post(&url)
            .header("cookie", &session.cookie)
            .form(&[("csrf", "0".repeat(64))]),
        c.post(&url)
            .header("cookie", &session.cookie)
            .header("origin", "http://evil.example")
            .form(&[("csrf", &session.csrf)]),
        c.post(&url)
            .header("cookie", &session.cookie)
            .header("sec-fetch-site", "cross-site")
            .form(&[("csrf", &session.csrf)]),
    ];
    for request in refused {
        let r = request.send().await.unwrap();
        assert_eq!(r.status(), 403);
    }
    assert_eq!(
        crate::helpers::event_row(&app.db_path, one).state,
        "dead",
        "a refused POST changed nothing"
    );

    let r = c
        .post(&url)
        .header("cookie", &session.cookie)
        .header("origin", &same_origin)
        .header("sec-fetch-site", "same-origin")
        .form(&[("csrf", &session.csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()[LOCATION], format!("/events/{one}?replayed=1"));
    let state = crate::helpers::event_row(&app.db_path, one).state;
    assert!(state == "pending" || state == "delivered", "{state}");
    wait_for_state(&app.db_path, one, "delivered").await;
    let page = get(&app, &format!("/events/{one}?replayed=1"), &session.cookie).await;
    assert!(page.contains("back to pending"), "{page}");

    // "Replay all dead of github" takes the other one.
    let r = c
        .post(app.admin_url("/replay"))
        .header("cookie", &session.cookie)
        .form(&[("csrf", session.csrf.as_str()), ("source", "github")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()[LOCATION], "/dead?source=github&replayed=1");
    wait_for_state(&app.db_path, two, "delivered").await;
    app.shutdown().await;
}

#[tokio::test]
async fn an_event_whose_body_retention_dropped_offers_no_replay() {
    let down = Downstream::start(|_, _| Reply::status(204)).await;
    let app = TestApp::spawn(&deliver_source(
        "github",
        &url_destination(&down.url()),
        "5s",
        3,
    ))
    .await;
    let mut ids = Vec::new();
    for delivery in ["kept", "emptied"] {
        let id = json(app.post_github(delivery, b"{}").await).await["id"]
            .as_i64()
            .unwrap();
        wait_for_state(&app.db_path, id, "delivered").await;
        ids.push(id);
    }
    // What retention does once body_days have passed.
    app.db()
        .execute("UPDATE events SET body = NULL WHERE id = ?1", [ids[1]])
        .unwrap();
    let session = login(&app).await;
    let kept = get(&app, &format!("/events/{}", ids[0]), &session.cookie).await;
    assert!(
        kept.contains(&format!("action=\"/events/{}/replay\"", ids[0])),
        "{kept}"
    );
    let emptied = get(&app, &format!("/events/{}", ids[1]), &session.cookie).await;
    assert!(!emptied.contains("/replay\""), "{emptied}");
    assert!(emptied.contains("can no longer be replayed"), "{emptied}");
    app.shutdown().await;
}

#[tokio::test]
async fn a_session_cookie_does_not_open_the_api() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    let session = login(&app).await;
    for path in ["/api/events", "/api/stats", "/metrics"] {
        let r = client()
            .get(app.admin_url(path))
            .header("cookie", &session.cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{path}");
    }
    let r = client()
        .post(app.admin_url("/api/replay"))
        .header("cookie", &session.cookie)
        .json(&serde_json::json!({"state": "dead"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(app.admin_get("/api/stats").await.status(), 200);
    app.shutdown().await;
}

#[tokio::test]
async fn the_overview_shows_a_pause_and_its_buttons_pause_and_resume() {
    let down = Downstream::start(|_, _| Reply::status(204)).await;
    let app = TestApp::spawn(&deliver_source(
        "github",
        &url_destination(&down.url()),
        "5s",
        3,
    ))
    .await;
    let session = login(&app).await;
    let page = get(&app, "/", &session.cookie).await;
    let pause = "action=\"/destinations/github/default/pause\"";
    assert!(page.contains(pause), "{page}");
    let c = client();
    let url = app.admin_url("/destinations/github/default/pause");
    // Without the CSRF token: refused, nothing paused.
    let r = c
        .post(&url)
        .header("cookie", &session.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(
        !get(&app, "/", &session.cookie)
            .await
            .contains("paused by hand")
    );
    let r = c
        .post(&url)
        .header("cookie", &session.cookie)
        .form(&[("csrf", &session.csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let page = get(&app, "/", &session.cookie).await;
    assert!(page.contains("paused by hand since"), "{page}");
    assert!(
        page.contains("action=\"/destinations/github/default/resume\""),
        "{page}"
    );
    assert_eq!(app.post_github("held", b"{}").await.status(), 202);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(down.hits().is_empty());
    let r = c
        .post(app.admin_url("/destinations/github/default/resume"))
        .header("cookie", &session.cookie)
        .form(&[("csrf", &session.csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    down.wait_for_hits(1).await;
    assert!(get(&app, "/", &session.cookie).await.contains(pause));
    app.shutdown().await;
}
