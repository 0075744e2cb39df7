//! Every duration and count in the config is bounded, checked through the
//! real binary: `hookbox check` refuses an absurd value of each one, naming
//! its key, all in one report; and `hookbox serve` with every one at its
//! maximum at once starts, answers `/readyz`, accepts a signed delivery,
//! delivers it, and stops with exit 0 on SIGTERM, without a panic.
//!
//! The keys come from `hookbox::config::limits`, which the unit test
//! `config::tests::every_duration_and_count_field_has_a_limit` holds to the
//! config types: a new duration or count field fails there until it has a
//! limit, and from then on is exercised here too.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hookbox::config::RawConfig;
use hookbox::config::limits::{COUNTS, DURATIONS};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};

use crate::helpers::{
    ChildServer, free_addr, github_request, hmac_sha256, hookbox, json, now_secs, wait_for_state,
};

/// A certificate pair for the public listener and the CA a client trusts.
pub(crate) struct Tls {
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
    pub(crate) ca: String,
}

/// A CA and a certificate for 127.0.0.1 it signed, written in `dir`.
pub(crate) fn tls_files(dir: &Path) -> Tls {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().unwrap();
    let leaf = params.signed_by(&key, &issuer).unwrap();
    let tls = Tls {
        cert: dir.join("fullchain.pem"),
        key: dir.join("key.pem"),
        ca: issuer.pem(),
    };
    std::fs::write(&tls.cert, format!("{}{}", leaf.pem(), issuer.pem())).unwrap();
    std::fs::write(&tls.key, key.serialize_pem()).unwrap();
    tls
}

const STRIPE_SECRET: &str = "whsec_limits";

/// Every table that holds a duration or a count, for a server in `dir`
/// (without `listen`, `admin_listen` and `database`): a github source with
/// a command destination and redelivery, a stripe source with backfill and
/// a pull destination, a
/// source allowing the `"github"` IP set (so the set refresher runs) with a
/// redis destination nobody answers, a
/// gitlab source with resend, TLS
/// from files, snapshots, an alert. Every API is a port nobody listens on.
fn full_config(dir: &Path, tls: &Tls) -> toml::Table {
    let nowhere = format!("http://{}", free_addr());
    let (redis, mqtt) = (free_addr(), free_addr());
    toml::from_str(&format!(
        r#"
        [server.tls]
        cert = {cert:?}
        key = {key:?}
        [retention]
        [search]
        [backup]
        dir = {backups:?}
        [edge]
        github_meta_url = "{nowhere}/meta"
        [[sources]]
        name = "github"
        kind = "github"
        secrets = ["test-secret"]
        max_body_bytes = 1000
        deliver = {{ command = ["true"] }}
        github_redelivery = {{ repo = "acme/shop", hook_id = 1, token = "t", api_url = "{nowhere}" }}
        [[sources]]
        name = "stripe"
        kind = "stripe"
        secrets = ["{STRIPE_SECRET}"]
        stripe_backfill = {{ api_key = "k", api_url = "{nowhere}" }}
        deliver = {{ pull = {{ token = "pull-token-0123456789" }} }}
        [[sources]]
        name = "shopify"
        kind = "shopify"
        secrets = ["s"]
        allow_ips = ["github"]
        deliver = {{ redis = {{ url = "redis://{redis}", stream = "s" }} }}
        [[sources]]
        name = "gitlab"
        kind = "gitlab"
        secrets = ["s"]
        gitlab_redelivery = {{ project = 1, hook_id = 1, token = "t", api_url = "{nowhere}" }}
        deliver = {{ mqtt = {{ url = "mqtt://{mqtt}", topic = "t" }} }}
        [[sources]]
        name = "paddle"
        kind = "paddle"
        secrets = ["pdl_ntfset_01limits_secret"]
        paddle_replay = {{ api_key = "k", notification_setting_id = "ntfset_01limits", api_url = "{nowhere}" }}
        [[sources]]
        name = "square"
        kind = "square"
        secrets = ["square-signature-key"]
        public_url = "https://hooks.example.com/hooks/square"
        square_backfill = {{ access_token = "t", api_url = "{nowhere}" }}
        [[alerts]]
        url = "{nowhere}/alert"
        format = "slack"
        "#,
        cert = tls.cert.display().to_string(),
        key = tls.key.display().to_string(),
        backups = dir.join("backups").display().to_string(),
    ))
    .unwrap()
}

/// Sets the dotted `key` in every table of `doc` it can be in (so in each
/// source that has the key's table); false when there is none.
fn set_in(doc: &mut toml::Table, key: &str, value: &toml::Value) -> bool {
    let Some((head, rest)) = key.split_once('.') else {
        doc.insert(key.to_owned(), value.clone());
        return true;
    };
    match doc.get_mut(head) {
        Some(toml::Value::Table(t)) => set_in(t, rest, value),
        Some(toml::Value::Array(items)) => items.iter_mut().fold(false, |done, item| match item {
            toml::Value::Table(t) => set_in(t, rest, value) | done,
            _ => done,
        }),
        _ => false,
    }
}

fn set(doc: &mut toml::Table, key: &str, value: &toml::Value) {
    assert!(set_in(doc, key, value), "{key}: no table for it");
}

/// How `hookbox check` names `key` (`sources.deliver.timeout` is
/// `sources[0] ("github").deliver.timeout`).
fn shown(key: &str) -> String {
    match key.strip_prefix("sources.") {
        Some(rest) if rest.starts_with("stripe_backfill") || rest.starts_with("deliver.pull") => {
            format!("sources[1] (\"stripe\").{rest}")
        }
        Some(rest) if rest.starts_with("gitlab_redelivery") || rest.starts_with("deliver.mqtt") => {
            format!("sources[3] (\"gitlab\").{rest}")
        }
        Some(rest) if rest.starts_with("deliver.redis") => {
            format!("sources[2] (\"shopify\").{rest}")
        }
        Some(rest) if rest.starts_with("paddle_replay") => {
            format!("sources[4] (\"paddle\").{rest}")
        }
        Some(rest) if rest.starts_with("square_backfill") => {
            format!("sources[5] (\"square\").{rest}")
        }
        Some(rest) => format!("sources[0] (\"github\").{rest}"),
        None => match key.strip_prefix("alerts.") {
            Some(rest) => format!("alerts[0].{rest}"),
            None => key.to_owned(),
        },
    }
}

fn duration(d: Duration) -> toml::Value {
    toml::Value::String(humantime::format_duration(d).to_string())
}

/// The widest integer TOML can give the field of `key`: `i64::MAX`, or
/// `u32::MAX` for a `u32` field (serde refuses more before validation).
fn widest(doc: &toml::Table, key: &str) -> i64 {
    let mut probe = doc.clone();
    set(&mut probe, key, &toml::Value::Integer(i64::MAX));
    if toml::Value::Table(probe).try_into::<RawConfig>().is_ok() {
        i64::MAX
    } else {
        i64::from(u32::MAX)
    }
}

#[test]
fn check_refuses_an_absurd_value_of_every_duration_and_count_naming_each_key() {
    let dir = tempfile::tempdir().unwrap();
    let tls = tls_files(dir.path());
    let mut doc = full_config(dir.path(), &tls);
    set(
        &mut doc,
        "server.database",
        &toml::Value::String(dir.path().join("hookbox.db").display().to_string()),
    );
    // The values the security review found `check` accepting and `serve`
    // dying of: centuries of seconds, and counts as wide as the type.
    let absurd = toml::Value::String("300000000000y".to_owned());
    for limit in DURATIONS {
        set(&mut doc, limit.key, &absurd);
    }
    for limit in COUNTS {
        let value = toml::Value::Integer(widest(&doc, limit.key));
        set(&mut doc, limit.key, &value);
    }
    let path = dir.path().join("hookbox.toml");
    std::fs::write(&path, toml::to_string(&doc).unwrap()).unwrap();
    let out = hookbox()
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let problems: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("  - "))
        .collect();
    for key in DURATIONS
        .iter()
        .map(|l| l.key)
        .chain(COUNTS.iter().map(|l| l.key))
    {
        let named = format!("{}: ", shown(key));
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with(&named) && p.contains("is over the maximum of")),
            "no {named:?} over the maximum in:\n{stderr}"
        );
    }
    assert!(
        problems
            .iter()
            .all(|p| p.contains("is over the maximum of")),
        "only the limits should complain:\n{stderr}"
    );
}

/// `[server]` leaves as lines for [`ChildServer`] (which writes the
/// `[server]` header itself), and the rest of `doc` as TOML.
fn serve_text(mut doc: toml::Table) -> (String, String) {
    let Some(toml::Value::Table(server)) = doc.remove("server") else {
        panic!("no [server] table");
    };
    let mut leaves = String::new();
    let mut tables = toml::Table::new();
    for (key, value) in server {
        match value {
            toml::Value::Table(_) => {
                tables.insert(key, value);
            }
            value => leaves.push_str(&format!("{key} = {value}\n")),
        }
    }
    doc.insert("server".to_owned(), toml::Value::Table(tables));
    (leaves, toml::to_string(&doc).unwrap())
}

/// A Stripe event signed now: its timestamp is checked against
/// `tolerance`.
fn stripe_request(client: &reqwest::Client, url: &str) -> reqwest::RequestBuilder {
    let now = now_secs();
    let body = br#"{"id":"evt_limits","type":"invoice.paid"}"#;
    let mut signed = format!("{now}.").into_bytes();
    signed.extend_from_slice(body);
    let sig = hex::encode(hmac_sha256(STRIPE_SECRET.as_bytes(), &signed));
    client
        .post(url)
        .header("stripe-signature", format!("t={now},v1={sig}"))
        .body(body.to_vec())
}

#[tokio::test]
async fn serve_runs_with_every_duration_and_count_at_its_maximum() {
    let dir = tempfile::tempdir().unwrap();
    let tls = tls_files(dir.path());
    let mut doc = full_config(dir.path(), &tls);
    for limit in DURATIONS {
        set(&mut doc, limit.key, &duration(limit.max));
    }
    for limit in COUNTS {
        let max = i64::try_from(limit.max).unwrap();
        set(&mut doc, limit.key, &toml::Value::Integer(max));
    }
    let db = dir.path().join("hookbox.db");
    let client = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(tls.ca.as_bytes()).unwrap()])
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();

    let (server_extra, rest) = serve_text(doc.clone());
    let mut server = ChildServer::spawn_ready(dir.path(), &db, &rest, &server_extra, 0).await;
    let https = |path: &str| format!("https://{}{path}", server.addr);
    let ready = client.get(https("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    let body = br#"{"zen":"Keep it logically awesome."}"#;
    let response = github_request(&client, &https("/hooks/github"), "at-the-maximum", body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202, "{}", server.log_tail(40));
    let id = json(response).await["id"].as_i64().unwrap();
    wait_for_state(&db, id, "delivered").await;
    let response = stripe_request(&client, &https("/hooks/stripe"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        202,
        "the widest tolerance still lets now in"
    );
    stop(&mut server).await;

    // `edge.block_for` only counts once an address is blocked, which the
    // widest `max_failures` never gets to: the second run blocks at once.
    set(&mut doc, "edge.max_failures", &toml::Value::Integer(1));
    let (server_extra, rest) = serve_text(doc);
    let mut server = ChildServer::spawn_ready(dir.path(), &db, &rest, &server_extra, 1).await;
    let https = |path: &str| format!("https://{}{path}", server.addr);
    let forged = client
        .post(https("/hooks/github"))
        .header("x-github-event", "push")
        .header("x-github-delivery", "forged")
        .header("x-hub-signature-256", format!("sha256={}", "0".repeat(64)))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 401);
    let blocked = github_request(&client, &https("/hooks/github"), "blocked", body)
        .send()
        .await
        .unwrap();
    assert_eq!(blocked.status(), 429, "{}", server.log_tail(40));
    assert_eq!(blocked.headers()["retry-after"], "86400");
    stop(&mut server).await;
}

/// SIGTERM: exit 0, and nothing panicked on the way (a panic in a task
/// does not end the process).
async fn stop(server: &mut ChildServer) {
    let status = server.terminate(Duration::from_secs(30)).await;
    assert!(status.success(), "{status:?}\n{}", server.log_tail(40));
    let output = server.output();
    assert!(!output.contains("panicked"), "{output}");
}
