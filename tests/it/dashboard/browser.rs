//! The dashboard in a real headless Chromium, driven over WebDriver
//! (fantoccini against the `chromedriver` this test starts): log in, open
//! the dead letters, press replay, watch the state change; a `<script>`
//! event renders as text and fires nothing; a form on another site cannot
//! replay. Screenshots go to `target/dashboard-*.png`.
//!
//! Needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs
//! them). Without them the test fails when `CI` is set and is skipped,
//! with a message, otherwise.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::Router;
use axum::response::Html;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;
use tokio::net::TcpListener;

use super::{SCRIPT, post_script_event};
use crate::helpers::*;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A source without a destination, for the `<script>` event.
const INBOX: &str =
    "\n[[sources]]\nname = \"inbox\"\nkind = \"github\"\nsecrets = [\"test-secret\"]\n";

/// Kills chromedriver (and so the browser it started) however the test ends.
pub(crate) struct Driver {
    child: Child,
    port: u16,
    _profile: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether Chromium and chromedriver are here; see [`outside_tool`].
pub(crate) fn browser_available() -> bool {
    outside_tool(
        &format!("{CHROMIUM} or {CHROMEDRIVER}"),
        Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists(),
        "apt-get install -y chromium chromium-driver",
    )
}

/// How long to wait for an element after a navigation or a click: the page
/// may still be loading when the next command arrives.
pub(crate) const FIND_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

pub(crate) async fn start_driver() -> Driver {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let driver = Driver {
        child,
        port,
        _profile: tempfile::tempdir().unwrap(),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "chromedriver did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    driver
}

pub(crate) async fn connect(driver: &Driver) -> Client {
    let profile = driver._profile.path().display().to_string();
    let caps = json!({
        "goog:chromeOptions": {
            "binary": CHROMIUM,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync",
                "--window-size=1280,900", format!("--user-data-dir={profile}"),
            ],
        }
    });
    let serde_json::Value::Object(caps) = caps else {
        unreachable!()
    };
    ClientBuilder::new(HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a WebDriver session in Chromium")
}

pub fn screenshot_path(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("dashboard-{name}.png"))
}

pub(crate) async fn screenshot(browser: &Client, name: &str) {
    let png = browser.screenshot().await.unwrap();
    std::fs::write(screenshot_path(name), png).unwrap();
}

/// Clicks what `locator` finds and waits until the page it was on has been
/// replaced, so the next lookup sees the new page, not the old one.
pub(crate) async fn click_and_wait(browser: &Client, locator: Locator<'_>) {
    let element = browser
        .wait()
        .at_most(FIND_WAIT)
        .for_element(locator)
        .await
        .unwrap();
    element.click().await.unwrap();
    let deadline = std::time::Instant::now() + FIND_WAIT;
    while element.is_displayed().await.is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the click did not lead to a new page"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) async fn text_of(browser: &Client, css: &str) -> String {
    browser
        .wait()
        .at_most(FIND_WAIT)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css}: {e}"))
        .text()
        .await
        .unwrap()
}

/// Logs `browser` in to `app`'s dashboard with the admin token.
pub(crate) async fn log_in(browser: &Client, app: &TestApp) {
    browser.goto(&app.admin_url("/login")).await.unwrap();
    let field = browser
        .wait()
        .at_most(FIND_WAIT)
        .for_element(Locator::Css("input[name=token]"))
        .await
        .unwrap();
    field.send_keys(ADMIN_TOKEN).await.unwrap();
    click_and_wait(browser, Locator::Css("button[type=submit]")).await;
    assert_eq!(text_of(browser, "h1").await, "Overview");
}

/// An attacker's page on another origin: one button that posts a replay.
async fn evil_site(target: String) -> (String, tokio::task::JoinHandle<()>) {
    let page = format!(
        "<!doctype html><form method=post action=\"{target}\"><input type=hidden name=csrf value=guess>\
         <button id=go type=submit>Win a prize</button></form>"
    );
    let router = Router::new().fallback(move || {
        let page = page.clone();
        async move { Html(page) }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    // "localhost" is another site than "127.0.0.1" to the browser.
    let url = format!(
        "http://localhost:{}/",
        listener.local_addr().unwrap().port()
    );
    let task = tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    (url, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_a_person_logs_in_replays_a_dead_letter_and_sees_scripts_as_text() {
    if !browser_available() {
        return;
    }
    let down = Downstream::start(|_, _| Reply::status(410)).await;
    let sources = format!(
        "{}{INBOX}",
        deliver_source("github", &url_destination(&down.url()), "5s", 3)
    );
    let app = TestApp::spawn(&sources).await;
    let body = br#"{"repository":{"full_name":"acme/site"}}"#;
    let dead = post_event(
        app.addr,
        "github",
        "browser-dead-1",
        "application/json",
        body,
    )
    .await;
    let kept = post_event(
        app.addr,
        "github",
        "browser-dead-2",
        "application/json",
        body,
    )
    .await;
    for id in [dead, kept] {
        wait_for_state(&app.db_path, id, "dead").await;
    }
    let script = post_script_event(&app, "inbox").await;
    down.set_script(|_, _| Reply::status(204));

    let driver = start_driver().await;
    let browser = connect(&driver).await;

    // Not logged in: the dashboard sends us to the login form.
    browser.goto(&app.admin_url("/dead")).await.unwrap();
    assert_eq!(browser.current_url().await.unwrap().path(), "/login");
    let field = browser
        .wait()
        .at_most(FIND_WAIT)
        .for_element(Locator::Css("input[name=token]"))
        .await
        .unwrap();
    field.send_keys("not-the-token-at-all").await.unwrap();
    click_and_wait(&browser, Locator::Css("button[type=submit]")).await;
    let refused = text_of(&browser, "p.error").await;
    assert!(refused.contains("not the admin token"), "{refused}");
    let field = browser
        .wait()
        .at_most(FIND_WAIT)
        .for_element(Locator::Css("input[name=token]"))
        .await
        .unwrap();
    field.send_keys(ADMIN_TOKEN).await.unwrap();
    click_and_wait(&browser, Locator::Css("button[type=submit]")).await;
    assert_eq!(text_of(&browser, "h1").await, "Overview");
    screenshot(&browser, "overview").await;

    // The dead letters, through the navigation.
    click_and_wait(&browser, Locator::LinkText("Dead letters")).await;
    assert_eq!(text_of(&browser, "h1").await, "Dead letters");
    let table = text_of(&browser, "table").await;
    assert!(
        table.contains("browser-dead-1") && table.contains("browser-dead-2"),
        "{table}"
    );
    screenshot(&browser, "dead").await;

    // A form on another site cannot replay: no cookie goes with it
    // (SameSite=Strict) and the dashboard refuses the cross-site POST.
    let (evil, evil_task) = evil_site(app.admin_url(&format!("/events/{dead}/replay"))).await;
    browser.goto(&evil).await.unwrap();
    click_and_wait(&browser, Locator::Id("go")).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(crate::helpers::event_row(&app.db_path, dead).state, "dead");
    evil_task.abort();

    // Press replay on one row: its page says so and the state moves on.
    browser.goto(&app.admin_url("/dead")).await.unwrap();
    let button = format!("form[action=\"/events/{dead}/replay\"] button");
    click_and_wait(&browser, Locator::Css(&button)).await;
    assert_eq!(
        browser.current_url().await.unwrap().path(),
        format!("/events/{dead}")
    );
    assert!(
        text_of(&browser, "p.notice")
            .await
            .contains("back to pending")
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let state = text_of(&browser, "span.state").await;
        if state == "delivered" {
            break;
        }
        assert!(Instant::now() < deadline, "still {state}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        browser.refresh().await.unwrap();
    }
    screenshot(&browser, "replayed").await;
    assert_eq!(down.hits_for("browser-dead-1").len(), 2);
    assert_eq!(crate::helpers::event_row(&app.db_path, kept).state, "dead");

    // The <script> event: shown as text, no dialog, no script element.
    browser
        .goto(&app.admin_url(&format!("/events/{script}")))
        .await
        .unwrap();
    assert!(browser.get_alert_text().await.is_err(), "an alert fired");
    // A JSON body is shown indented.
    assert_eq!(
        text_of(&browser, "pre").await,
        format!("{{\n  \"comment\": \"{SCRIPT}\"\n}}")
    );
    assert!(text_of(&browser, "table").await.contains(SCRIPT));
    let scripts = browser
        .execute("return document.querySelectorAll('script').length", vec![])
        .await
        .unwrap();
    assert_eq!(scripts, json!(0));
    screenshot(&browser, "script-event").await;

    // Logging out ends the session.
    click_and_wait(&browser, Locator::Css("form[action=\"/logout\"] button")).await;
    browser.goto(&app.admin_url("/")).await.unwrap();
    assert_eq!(browser.current_url().await.unwrap().path(), "/login");

    browser.close().await.unwrap();
    drop(driver);
    app.shutdown().await;
}
