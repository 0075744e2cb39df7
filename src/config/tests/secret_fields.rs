//! Every text field of every config type is either a secret reference,
//! which [`RawConfig::secrets_mut`] finds (and so `secret_env` withholds it
//! from commands and `hookbox check` redacts it), or named below as not
//! secret. The fields come from serde (`leaf_keys`), not from a list kept
//! here: a text field added to any config type fails this test until it
//! is put on one side.

use std::collections::{BTreeMap, BTreeSet};

use super::*;

/// What a probed field is set to.
const PROBE: &str = "env:HOOKBOX_PROBE_SECRET";

/// The secret fields, as the test finds them. Kept here too so that a
/// field leaving the list is a visible change.
const SECRET: [&str; 19] = [
    "admin.token",
    "alerts.signing_secret",
    "alerts.url",
    "sources.deliver.amqp.url",
    "sources.deliver.mqtt.url",
    "sources.deliver.nats.credentials",
    "sources.deliver.nats.url",
    "sources.deliver.redis.url",
    "sources.deliver.pull.token",
    "sources.deliver.signing_secret",
    "sources.deliver.url",
    "sources.github_redelivery.private_key",
    "sources.github_redelivery.token",
    "sources.gitlab_redelivery.token",
    "sources.paddle_replay.api_key",
    "sources.secrets",
    "sources.square_backfill.access_token",
    "sources.stripe_backfill.api_key",
    "sources.verify_token",
];

/// Text fields that hold no secret: names, addresses, paths, headers,
/// patterns, and paths to files that hold keys (`server.tls.key`: the file
/// is the secret, its path is not).
const NOT_SECRET: &[&str] = &[
    "backup.dir",
    "edge.github_meta_url",
    "edge.stripe_ips_url",
    "server.database",
    "server.tls.acme.cache_dir",
    "server.tls.acme.contact",
    "server.tls.acme.directory",
    "server.tls.acme.directory_ca",
    "server.tls.acme.domains",
    "server.tls.cert",
    "server.tls.key",
    "server.trusted_proxies",
    "sources.allow_ips",
    "sources.deliver.amqp.exchange",
    "sources.deliver.amqp.routing_key",
    "sources.deliver.command",
    "sources.deliver.events",
    "sources.deliver.mqtt.topic",
    "sources.deliver.name",
    "sources.deliver.nats.subject",
    "sources.deliver.rate",
    "sources.deliver.redis.stream",
    "sources.deliver.transform",
    "sources.github_redelivery.api_url",
    "sources.github_redelivery.app_id",
    "sources.github_redelivery.event_types",
    "sources.github_redelivery.org",
    "sources.github_redelivery.repo",
    "sources.gitlab_redelivery.api_url",
    "sources.gitlab_redelivery.event_types",
    "sources.gitlab_redelivery.group",
    "sources.gitlab_redelivery.project",
    "sources.hmac.event_type_header",
    "sources.hmac.event_type_pointer",
    "sources.hmac.header",
    "sources.hmac.id_header",
    "sources.hmac.id_pointer",
    "sources.hmac.prefix",
    "sources.hmac.signed_payload",
    "sources.hmac.timestamp_header",
    "sources.kind",
    "sources.name",
    "sources.order_key",
    "sources.paddle_replay.api_url",
    "sources.paddle_replay.notification_setting_id",
    "sources.public_url",
    "sources.square_backfill.api_url",
    "sources.square_backfill.types",
    "sources.stripe_backfill.api_url",
];

/// [`full_table`] with every table that holds a text field (the others
/// are made as the probe reaches them, see [`put`]).
fn every_table() -> toml::Table {
    let mut doc = full_table();
    let hmac = toml::Table::from_iter([("header".to_owned(), "X-Signature".into())]);
    set(&mut doc, "sources.hmac", &toml::Value::Table(hmac));
    doc
}

/// [`set`], making the tables on the way that `doc` does not have yet.
fn put(doc: &mut toml::Table, key: &str, value: &toml::Value) {
    let mut at = key;
    let mut table = &mut *doc;
    while let Some((head, rest)) = at.split_once('.') {
        if table.contains_key(head) {
            break;
        }
        table = table
            .entry(head)
            .or_insert(toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .unwrap();
        at = rest;
    }
    set(table, at, value);
}

/// `value` as a string and as a list of one, for fields of either shape.
fn shapes(value: &str) -> [toml::Value; 2] {
    [
        toml::Value::String(value.to_owned()),
        toml::Value::Array(vec![toml::Value::String(value.to_owned())]),
    ]
}

/// Every field that takes text, with the shape it takes, each marked
/// whether [`RawConfig::secrets_mut`] finds it.
fn text_fields() -> BTreeMap<String, (toml::Value, bool)> {
    let mut keys = Vec::new();
    leaf_keys(&mut Vec::new(), &mut keys);
    assert!(keys.len() > 50, "the probe found too few keys: {keys:?}");
    let mut found = BTreeMap::new();
    for (key, _) in keys {
        for value in shapes(PROBE) {
            let mut doc = every_table();
            put(&mut doc, &key, &value);
            let Ok(mut raw) = toml::Value::Table(doc).try_into::<RawConfig>() else {
                continue;
            };
            let secret = raw.secrets_mut().iter().any(|s| s.as_str() == PROBE);
            found.insert(key.clone(), (value, secret));
            break;
        }
    }
    found
}

#[test]
fn every_text_field_is_a_secret_reference_or_named_as_not_secret() {
    let fields = text_fields();
    let secret: BTreeSet<&str> = fields
        .iter()
        .filter(|(_, (_, s))| *s)
        .map(|(k, _)| k.as_str())
        .collect();
    let other: BTreeSet<&str> = fields
        .iter()
        .filter(|(_, (_, s))| !*s)
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(
        other,
        NOT_SECRET.iter().copied().collect(),
        "a text field of the config is either a secret reference (add it to \
         RawConfig::secrets_mut) or not secret (add it to NOT_SECRET)"
    );
    assert_eq!(secret, SECRET.into_iter().collect());
}

#[test]
fn commands_go_without_every_env_secret_and_check_shows_no_literal_one() {
    let fields = text_fields();
    let mut with_env = every_table();
    let mut with_literals = every_table();
    let mut names = Vec::new();
    let mut literals = Vec::new();
    for (i, (key, (shape, _))) in fields.iter().filter(|(_, (_, s))| *s).enumerate() {
        let [text, list] = shapes(&format!("env:HOOKBOX_SECRET_{i}"));
        put(
            &mut with_env,
            key,
            if shape.is_str() { &text } else { &list },
        );
        names.push((key, format!("HOOKBOX_SECRET_{i}")));
        let literal = format!("literal-secret-{i}-0123456789");
        let [text, list] = shapes(&literal);
        put(
            &mut with_literals,
            key,
            if shape.is_str() { &text } else { &list },
        );
        literals.push(literal);
    }
    assert_eq!(names.len(), SECRET.len());

    let raw: RawConfig = toml::Value::Table(with_env).try_into().unwrap();
    let withheld = raw.secret_env();
    for (key, name) in &names {
        assert!(
            withheld.contains(name),
            "{key} ({name}) is not withheld: {withheld:?}"
        );
    }

    let raw: RawConfig = toml::Value::Table(with_literals).try_into().unwrap();
    let shown = raw.redacted_toml();
    for literal in &literals {
        assert!(
            !shown.contains(literal.as_str()),
            "{literal} shown:\n{shown}"
        );
    }
    let reparsed: RawConfig = toml::from_str(&shown).unwrap();
    assert_eq!(reparsed.sources.len(), raw.sources.len());
}
