//! The manual's transform cookbook (docs/src/cookbook.md) stays true: each
//! recipe's `[[sources.deliver]]` table runs in the real binary, on its
//! sample event (tests/fixtures/cookbook/) posted signed through
//! `/hooks/{kind}`, and what arrives is the output the page shows, byte
//! for byte. The outputs on the page were checked with jq itself, not
//! computed by jaq.

use std::time::Duration;

use base64::Engine as _;

use crate::helpers::*;

/// One recipe as the page writes it.
struct Recipe {
    kind: String,
    event_type: String,
    fixture: String,
    /// The `[[sources.deliver]]` table.
    table: String,
    name: String,
    /// What the page says is sent, and whether as text.
    sends: String,
    text: bool,
}

/// Every recipe of the page: a `<!-- cookbook: KIND EVENT FIXTURE -->`
/// marker (the event type is what the provider's header or body says),
/// the toml block after it, then "sends" and a json or text block.
fn recipes() -> Vec<Recipe> {
    let page = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/cookbook.md"),
    )
    .unwrap();
    let mut found = Vec::new();
    for part in page.split("<!-- cookbook: ").skip(1) {
        let (marker, rest) = part.split_once(" -->\n```toml\n").unwrap();
        // KIND EVENT TYPE (which may have spaces) FIXTURE
        let (kind, named) = marker.split_once(' ').unwrap();
        let (event_type, fixture) = named.rsplit_once(' ').unwrap();
        let (table, rest) = rest.split_once("```\n\nsends\n\n```").unwrap();
        let (lang, rest) = rest.split_once('\n').unwrap();
        let (sends, _) = rest.split_once("\n```").unwrap();
        let parsed: toml::Value = toml::from_str(table).unwrap();
        let name = parsed["sources"]["deliver"][0]["name"]
            .as_str()
            .unwrap()
            .to_owned();
        found.push(Recipe {
            kind: kind.into(),
            event_type: event_type.into(),
            fixture: fixture.into(),
            table: table.into(),
            name,
            sends: sends.into(),
            text: lang == "text",
        });
    }
    found
}

const STRIPE_SECRET: &str = "whsec_stripe";
const SHOPIFY_SECRET: &str = "shpss";
const GITLAB_TOKEN: &str = "glpat-cookbook";

/// The recipes of `kind` under a source of that kind, each sending to
/// `down` at `/{name}` instead of its URL.
fn source(kind: &str, recipes: &[Recipe], down: &str) -> String {
    let secret = match kind {
        "github" => GITHUB_SECRET,
        "stripe" => STRIPE_SECRET,
        "shopify" => SHOPIFY_SECRET,
        "gitlab" => GITLAB_TOKEN,
        other => panic!("no secret for {other}"),
    };
    let mut text =
        format!("[[sources]]\nname = \"{kind}\"\nkind = \"{kind}\"\nsecrets = [\"{secret}\"]\n");
    for r in recipes.iter().filter(|r| r.kind == kind) {
        let table: String = r
            .table
            .lines()
            .map(|line| {
                if line.starts_with("url = ") {
                    format!("url = \"{down}/{}\"\n", r.name)
                } else {
                    format!("{line}\n")
                }
            })
            .collect();
        text.push_str(&table);
    }
    text
}

/// Posts `body` to `/hooks/{kind}` signed as that provider signs.
async fn post(addr: std::net::SocketAddr, r: &Recipe, body: &[u8]) {
    let client = reqwest::Client::new();
    let request = client
        .post(format!("http://{addr}/hooks/{}", r.kind))
        .header("content-type", "application/json")
        .body(body.to_vec());
    let request = match r.kind.as_str() {
        "github" => request
            .header("x-github-event", &r.event_type)
            .header("x-github-delivery", format!("cookbook-{}", r.name))
            .header("x-hub-signature-256", github_signature(GITHUB_SECRET, body)),
        "stripe" => {
            let now = now_secs();
            let mut signed = format!("{now}.").into_bytes();
            signed.extend_from_slice(body);
            let sig = hex::encode(hmac_sha256(STRIPE_SECRET.as_bytes(), &signed));
            request.header("stripe-signature", format!("t={now},v1={sig}"))
        }
        "shopify" => request
            .header(
                "x-shopify-hmac-sha256",
                base64::engine::general_purpose::STANDARD
                    .encode(hmac_sha256(SHOPIFY_SECRET.as_bytes(), body)),
            )
            .header("x-shopify-webhook-id", format!("cookbook-{}", r.name))
            .header("x-shopify-topic", &r.event_type),
        "gitlab" => request
            .header("x-gitlab-token", GITLAB_TOKEN)
            .header("x-gitlab-event", &r.event_type)
            .header("idempotency-key", format!("cookbook-{}", r.name)),
        other => panic!("cannot sign for {other}"),
    };
    let answer = request.send().await.unwrap();
    assert_eq!(answer.status(), 202, "posting the sample of {}", r.name);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cookbook_recipe_sends_what_the_page_shows() {
    let recipes = recipes();
    assert_eq!(recipes.len(), 6, "the page's recipes were not all found");
    let down = Downstream::start(|_, _| Reply::status(200)).await;
    let mut kinds: Vec<&str> = recipes.iter().map(|r| r.kind.as_str()).collect();
    kinds.dedup();
    let sources: String = kinds
        .iter()
        .map(|k| source(k, &recipes, &format!("http://{}", down.addr)))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let server = ChildServer::spawn_ready_with(
        dir.path(),
        &db,
        &sources,
        "",
        0,
        &[("FULFILMENT_TOKEN", "fulfil-3b7e")],
        |_| {},
    )
    .await;
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cookbook");
    for r in &recipes {
        let body = std::fs::read(fixtures.join(&r.fixture)).unwrap();
        post(server.addr, r, &body).await;
    }
    // Each recipe's delivery settles, delivered (or says why not).
    let deadline = std::time::Instant::now() + PATIENCE;
    for r in &recipes {
        loop {
            let row: Option<(String, Option<String>)> = open(&db)
                .query_row(
                    "SELECT state, last_error FROM deliveries WHERE destination = ?1",
                    [&r.name],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .ok();
            match row {
                Some((state, _)) if state == "delivered" => break,
                Some((state, error)) if state == "dead" || std::time::Instant::now() > deadline => {
                    panic!("{}: {state} ({error:?})\n{}", r.name, server.log_tail(30))
                }
                None if std::time::Instant::now() > deadline => {
                    panic!("{}: no delivery\n{}", r.name, server.log_tail(30))
                }
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }
    let hits = down.wait_for_hits(recipes.len()).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(down.hits().len(), recipes.len(), "one message per recipe");
    for r in &recipes {
        let hit = hits
            .iter()
            .find(|h| h.uri.path() == format!("/{}", r.name))
            .unwrap_or_else(|| panic!("nothing arrived for {}", r.name));
        assert_eq!(
            std::str::from_utf8(&hit.body).unwrap(),
            r.sends,
            "what {} sends",
            r.name
        );
        let content_type = if r.text {
            "text/plain; charset=utf-8"
        } else {
            "application/json"
        };
        assert_eq!(hit.header("content-type"), content_type, "{}", r.name);
    }
    let fulfilment = hits.iter().find(|h| h.uri.path() == "/fulfilment").unwrap();
    assert_eq!(
        (
            fulfilment.method.as_str(),
            fulfilment.header("authorization")
        ),
        ("PUT", "fulfil-3b7e")
    );
    let ntfy = hits.iter().find(|h| h.uri.path() == "/ntfy").unwrap();
    assert_eq!(
        (ntfy.header("title"), ntfy.header("tags")),
        ("CI failed", "rotating_light")
    );
}
