use std::time::Duration;

use super::load::hide_quoted_strings;
use super::*;

fn load_str(text: &str) -> Result<Config, ConfigError> {
    from_toml(
        text,
        "test".to_owned(),
        &crate::ingress::receive::registry::PROVIDERS,
    )
}

#[test]
fn a_minimal_file_gets_every_default() {
    let config = load_str(
        r#"
        [[sources]]
        name = "github"
        kind = "github"
        secrets = ["literal-secret"]
        "#,
    )
    .unwrap();
    assert_eq!(config.server.listen.to_string(), "0.0.0.0:8080");
    assert_eq!(config.server.admin_listen.to_string(), "127.0.0.1:8081");
    assert_eq!(config.server.durability, Durability::Full);
    let github = config.source("github").unwrap();
    assert_eq!(github.max_body_bytes, DEFAULT_MAX_BODY_BYTES);
    assert_eq!(github.tolerance, Duration::from_secs(300));
    assert_eq!(github.secrets[0].expose(), "literal-secret");
}

#[test]
fn tolerance_defaults_to_the_kind_s_own_window_unless_set() {
    let config = load_str(
        r#"
        [[sources]]
        name = "linear"
        kind = "linear"
        secrets = ["s"]
        [[sources]]
        name = "paddle"
        kind = "paddle"
        secrets = ["s"]
        [[sources]]
        name = "twitch"
        kind = "twitch"
        secrets = ["s"]
        [[sources]]
        name = "slow"
        kind = "linear"
        secrets = ["s"]
        tolerance = "5m"
        "#,
    )
    .unwrap();
    let tolerance = |name: &str| config.source(name).unwrap().tolerance;
    assert_eq!(tolerance("linear"), Duration::from_secs(60));
    assert_eq!(tolerance("paddle"), Duration::from_secs(5));
    assert_eq!(tolerance("twitch"), Duration::from_secs(600));
    assert_eq!(tolerance("slow"), Duration::from_secs(300));
}

#[test]
fn unknown_keys_are_errors_naming_the_key() {
    let err = load_str("[server]\nlisten_addr = \"0.0.0.0:1\"\n").unwrap_err();
    assert!(err.to_string().contains("listen_addr"), "{err}");
}

#[test]
fn every_problem_is_reported_at_once() {
    let err = load_str(
        r#"
        [server]
        max_body_bytes = 0
        [[sources]]
        name = "Bad Name"
        kind = "github"
        secrets = []
        [[sources]]
        name = "stripe"
        kind = "stripe"
        secrets = ["env:HOOKBOX_TEST_UNSET_STRIPE_SECRET"]
        order_key = ["data/object/id"]
        "#,
    )
    .unwrap_err();
    let text = err.to_string();
    for needle in [
        "server.max_body_bytes",
        "sources[0] (\"Bad Name\").name",
        "sources[0] (\"Bad Name\").secrets",
        "sources[1] (\"stripe\").secrets[0] (env:HOOKBOX_TEST_UNSET_STRIPE_SECRET)",
        "sources[1] (\"stripe\").order_key[0]",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    assert_eq!(err.problems.len(), 5, "{text}");
}

#[test]
fn an_empty_secret_stops_start_up_but_a_disabled_source_does_not_need_one() {
    let err = load_str(
        r#"
        [[sources]]
        name = "github"
        kind = "github"
        secrets = [""]
        "#,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("sources[0] (\"github\").secrets[0]"),
        "{err}"
    );
    assert!(err.to_string().contains("empty"), "{err}");

    let config = load_str(
        r#"
        [[sources]]
        name = "github"
        kind = "github"
        enabled = false
        "#,
    )
    .unwrap();
    assert!(config.sources.is_empty());
}

#[test]
fn standard_secrets_must_be_base64() {
    let err = load_str(
        r#"
        [[sources]]
        name = "sw"
        kind = "standard"
        secrets = ["whsec_not base64!"]
        "#,
    )
    .unwrap_err();
    assert!(err.to_string().contains("whsec_"), "{err}");
    assert!(
        !err.to_string().contains("not base64!"),
        "the secret leaked: {err}"
    );
}

#[test]
fn generic_hmac_needs_its_table_and_a_sound_template() {
    let err = load_str(
        r#"
        [[sources]]
        name = "custom"
        kind = "hmac"
        secrets = ["s"]
        "#,
    )
    .unwrap_err();
    assert!(err.to_string().contains("[sources.hmac]"), "{err}");

    let err = load_str(
        r#"
        [[sources]]
        name = "custom"
        kind = "hmac"
        secrets = ["s"]
        [sources.hmac]
        header = "X-Signature"
        signed_payload = "{timestamp}:{nonce}"
        id_header = "X-Id"
        id_pointer = "/id"
        "#,
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("signed_payload"), "{text}");
    assert!(text.contains("not both"), "{text}");

    let config = load_str(
        r#"
        [[sources]]
        name = "custom"
        kind = "hmac"
        secrets = ["s"]
        [sources.hmac]
        header = "X-Signature"
        prefix = "sha256="
        encoding = "base64"
        timestamp_header = "X-Timestamp"
        id_pointer = "/id"
        "#,
    )
    .unwrap();
    let h = config.sources[0].hmac.as_ref().unwrap();
    assert_eq!(h.header, "x-signature");
    assert_eq!(
        h.signed_payload,
        vec![
            PayloadPart::Timestamp,
            PayloadPart::Literal(b".".to_vec()),
            PayloadPart::Body
        ]
    );
    assert_eq!(h.id, IdFrom::Field(Field::Pointer("/id".into())));
}

#[test]
fn redacted_output_hides_literals_and_shows_references() {
    let config = load_str(
        r#"
        [[sources]]
        name = "github"
        kind = "github"
        secrets = ["super-secret-literal", "env:HOME"]
        "#,
    )
    .unwrap();
    let text = config.redacted_toml();
    assert!(!text.contains("super-secret-literal"), "{text}");
    assert!(text.contains("[redacted]"), "{text}");
    assert!(text.contains("env:HOME"), "{text}");
    // What check prints must load again.
    let reparsed: RawConfig = toml::from_str(&text).unwrap();
    assert_eq!(reparsed.sources.len(), 1);
}

#[test]
fn duplicate_source_names_are_refused() {
    let err = load_str(
        r#"
        [[sources]]
        name = "a"
        kind = "github"
        secrets = ["x"]
        [[sources]]
        name = "a"
        kind = "shopify"
        secrets = ["y"]
        "#,
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("another source has this name"),
        "{err}"
    );
}

// ------------------------------------------------------------ deliver ---

const WHSEC: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// One github source with `deliver` set to `table` (TOML inline table body).
fn with_deliver(table: &str) -> Result<Config, ConfigError> {
    load_str(&format!(
        "[[sources]]\nname = \"github\"\nkind = \"github\"\nsecrets = [\"s\"]\ndeliver = {{ {table} }}\n"
    ))
}

fn deliver_problems(table: &str) -> String {
    with_deliver(table).unwrap_err().to_string()
}

#[test]
fn a_url_destination_gets_its_key_and_every_default() {
    let config = load_str(&format!(
        r#"
        [[sources]]
        name = "github"
        kind = "github"
        secrets = ["s"]
        [sources.deliver]
        url = "http://127.0.0.1:3000/webhooks/github"
        signing_secret = "{WHSEC}"
        "#
    ))
    .unwrap();
    let d = &config.source("github").unwrap().destinations[0];
    let Destination::Url {
        url, signing_key, ..
    } = &d.destination
    else {
        panic!("expected a url destination: {d:?}");
    };
    assert_eq!(
        url.expose().as_str(),
        "http://127.0.0.1:3000/webhooks/github"
    );
    let expected = Secret::new(WHSEC).standard_key().unwrap();
    assert_eq!(signing_key.as_ref(), Some(&expected));
    assert_eq!(d.timeout, Duration::from_secs(30));
    assert_eq!(d.max_attempts, 12);
    assert_eq!(d.backoff_base, Duration::from_secs(30));
    assert_eq!(d.backoff_cap, Duration::from_secs(3600));
    assert_eq!(d.concurrency, 16);
    assert_eq!(d.permanent_statuses, [400, 401, 403, 404, 410, 422]);
    assert!(!format!("{d:?}").contains(&format!("{signing_key:?}")));
}

#[test]
fn a_command_keeps_four_attempts_at_once_and_a_given_concurrency_wins() {
    let command = with_deliver(r#"command = ["/bin/true"]"#).unwrap();
    assert_eq!(command.sources[0].destinations[0].concurrency, 4);
    let url = with_deliver(&format!(
        r#"url = "http://127.0.0.1:3000/", signing_secret = "{WHSEC}", concurrency = 3"#
    ))
    .unwrap();
    assert_eq!(url.sources[0].destinations[0].concurrency, 3);
}

#[test]
fn the_design_inline_command_table_loads() {
    let config =
        with_deliver(r#"command = ["/usr/local/bin/on-stripe-event"], timeout = "60s""#).unwrap();
    let d = &config.sources[0].destinations[0];
    assert_eq!(
        d.destination,
        Destination::Command {
            argv: vec!["/usr/local/bin/on-stripe-event".into()],
            template: super::argv::Template::parse(&["/usr/local/bin/on-stripe-event".to_owned()])
                .unwrap(),
        }
    );
    assert_eq!(d.timeout, Duration::from_secs(60));
    assert_eq!(d.max_attempts, 12);
}

/// A github source with the `[[sources.deliver]]` tables in `tables`.
fn with_destinations(tables: &[&str]) -> Result<Config, ConfigError> {
    let mut text =
        "[[sources]]\nname = \"github\"\nkind = \"github\"\nsecrets = [\"s\"]\n".to_owned();
    for t in tables {
        text.push_str(&format!("[[sources.deliver]]\n{t}\n"));
    }
    load_str(&text)
}

#[test]
fn an_array_of_destinations_loads_each_with_its_name_filter_and_settings() {
    let config = with_destinations(&[
        r#"name = "deploy"
command = ["/usr/local/bin/deploy", "{/after}"]
events = ["push"]
when = { "/ref" = "refs/heads/main" }
concurrency = 1"#,
        &format!(
            "name = \"notify\"\nurl = \"http://127.0.0.1:3000/n\"\nsigning_secret = \"{WHSEC}\""
        ),
    ])
    .unwrap();
    let d = &config.sources[0].destinations;
    let names: Vec<&str> = d.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["deploy", "notify"]);
    assert_eq!((d[0].concurrency, d[1].concurrency), (1, 16));
    let push_to_main = super::route::Body::new(br#"{"ref": "refs/heads/main"}"#, true);
    assert!(d[0].filter.matches(Some("push"), &push_to_main));
    assert!(!d[0].filter.matches(Some("issues"), &push_to_main));
    assert!(d[1].filter.matches(Some("issues"), &push_to_main));
    // Printed back as an array, and read back the same.
    let text = config.redacted_toml();
    assert!(text.contains("[[sources.deliver]]"), "{text}");
    let reparsed: RawConfig = toml::from_str(&text).unwrap();
    assert_eq!(reparsed.sources[0].deliver.iter().count(), 2);
}

#[test]
fn a_single_table_or_a_lone_unnamed_one_is_the_destination_default() {
    let single = with_deliver(r#"command = ["/bin/true"]"#).unwrap();
    assert_eq!(single.sources[0].destinations[0].name, DEFAULT_NAME);
    let text = single.redacted_toml();
    assert!(
        text.contains("[sources.deliver]"),
        "printed as written: {text}"
    );
    let lone = with_destinations(&[r#"command = ["/bin/true"]"#]).unwrap();
    assert_eq!(lone.sources[0].destinations[0].name, DEFAULT_NAME);
    let named = with_deliver(r#"name = "ci", command = ["/bin/true"]"#).unwrap();
    assert_eq!(named.sources[0].destinations[0].name, "ci");
}

#[test]
fn destination_names_are_required_with_several_valid_and_unique() {
    let at = r#"sources[0] ("github").deliver"#;
    let cmd = r#"command = ["/bin/true"]"#;
    let err = with_destinations(&[cmd, cmd]).unwrap_err().to_string();
    assert!(
        err.contains(&format!(
            "{at}[0].name: required when a source has several destinations"
        )),
        "{err}"
    );
    assert!(err.contains(&format!("{at}[1].name: required")), "{err}");
    let named = |n: &str| format!("name = {n:?}\n{cmd}");
    let err = with_destinations(&[&named("ci"), &named("ci")])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            r#"{at}[1] ("ci").name: "ci" is used twice in this source"#
        )),
        "{err}"
    );
    for bad in ["", "CI", "a b", "x/y", &"a".repeat(65)] {
        let err = with_destinations(&[&named(bad)]).unwrap_err().to_string();
        assert!(
            err.contains(".name: use 1-64 characters from a-z, 0-9, '-' and '_'"),
            "{bad:?}: {err}"
        );
    }
    assert!(with_destinations(&[&named(&"a-1_".repeat(16))]).is_ok());
    // A problem inside one destination is reported under its own key.
    let err = with_destinations(&[
        &named("ok"),
        "name = \"bad\"\nmax_attempts = 0\ncommand = [\"/bin/true\"]",
    ])
    .unwrap_err()
    .to_string();
    assert!(
        err.contains(&format!(r#"{at}[1] ("bad").max_attempts"#)),
        "{err}"
    );
}

#[test]
fn a_source_without_deliver_has_no_destination() {
    let config =
        load_str("[[sources]]\nname = \"a\"\nkind = \"github\"\nsecrets = [\"s\"]\n").unwrap();
    assert!(config.sources[0].destinations.is_empty());
}

#[test]
fn a_destination_filter_loads_and_a_bad_one_is_explained_under_its_key() {
    let config = with_deliver(
        r#"command = ["/bin/true"], events = ["push"], when = { "/ref" = "refs/heads/main" }"#,
    )
    .unwrap();
    let filter = &config.sources[0].destinations[0].filter;
    let main = super::route::Body::new(br#"{"ref": "refs/heads/main"}"#, true);
    assert!(filter.matches(Some("push"), &main));
    assert!(!filter.matches(Some("issues"), &main));
    let err = with_deliver(r#"command = ["/bin/true"], when = { "ref" = "main" }"#)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(r#"sources[0] ("github").deliver.when: "ref" is not a JSON pointer"#),
        "{err}"
    );
}

#[test]
fn each_deliver_problem_is_reported_under_its_key() {
    let at = "sources[0] (\"github\").deliver";
    let sig = format!("signing_secret = \"{WHSEC}\"");
    for (table, needle) in [
        (
            String::new(),
            format!("{at}: set url, command, pull, nats, redis, amqp or mqtt"),
        ),
        (
            format!(r#"url = "http://a", command = ["x"], {sig}"#),
            format!("{at}: set only one of url, command, pull, nats, redis, amqp and mqtt"),
        ),
        (
            format!(r#"url = "ftp://a/x", {sig}"#),
            format!("{at}.url ([redacted]): the scheme"),
        ),
        (
            format!(r#"url = "not a url", {sig}"#),
            format!("{at}.url ([redacted]): not a URL"),
        ),
        (
            r#"url = "http://a", headers = { "Content-Type" = "text/x" }"#.into(),
            format!("{at}.headers.\"Content-Type\": hookbox sets this header itself"),
        ),
        (
            r#"url = "http://a", headers = { "X-Key" = "env:HOOKBOX_TEST_UNSET_HEADER" }"#.into(),
            format!("{at}.headers.\"X-Key\" (env:HOOKBOX_TEST_UNSET_HEADER): environment variable"),
        ),
        (
            r#"url = "http://a", headers = { "bad name" = "x" }"#.into(),
            format!("{at}.headers.\"bad name\": not an HTTP header name"),
        ),
        (
            r#"url = "http://a", method = "GET""#.into(),
            "unknown variant `GET`, expected `POST` or `PUT`".into(),
        ),
        (
            r#"command = ["x"], method = "PUT", headers = { A = "b" }"#.into(),
            format!("{at}.headers: only for url destinations"),
        ),
        (
            r#"command = ["x"], transform = ".a | {b: }""#.into(),
            format!("{at}.transform: line 1, column "),
        ),
        (
            r#"pull = { token = "0123456789abcdef0" }, transform = ".""#.into(),
            format!("{at}.transform: not for pull destinations"),
        ),
        (
            r#"url = "http://a", signing_secret = "whsec_not base64!""#.into(),
            format!("{at}.signing_secret ([redacted]): a Standard Webhooks secret"),
        ),
        (
            r#"url = "http://a", signing_secret = "env:HOOKBOX_TEST_UNSET_DELIVER""#.into(),
            format!("{at}.signing_secret (env:HOOKBOX_TEST_UNSET_DELIVER)"),
        ),
        (
            format!(r#"command = ["x"], {sig}"#),
            format!("{at}.signing_secret: only for url"),
        ),
        (
            "command = []".into(),
            format!("{at}.command: must name a program"),
        ),
        (
            r#"command = ["", "x"]"#.into(),
            format!("{at}.command[0]: the program"),
        ),
        (
            r#"command = ["x"], max_attempts = 0"#.into(),
            format!("{at}.max_attempts"),
        ),
        (
            r#"command = ["x"], concurrency = 0"#.into(),
            format!("{at}.concurrency"),
        ),
        (
            r#"command = ["x"], timeout = "0s""#.into(),
            format!("{at}.timeout"),
        ),
        (
            r#"command = ["x"], backoff_base = "2h", backoff_cap = "1h""#.into(),
            format!("{at}.backoff_base: must not be longer than backoff_cap (1h)"),
        ),
        (
            r#"command = ["x"], permanent_statuses = [410, 204]"#.into(),
            format!("{at}.permanent_statuses[1]: 204"),
        ),
    ] {
        let text = deliver_problems(&table);
        assert!(
            text.contains(&needle),
            "{table}: missing {needle:?} in:\n{text}"
        );
        assert!(!text.contains("not base64!"), "the secret leaked: {text}");
    }
}

#[test]
fn deliver_problems_are_all_reported_at_once() {
    let err = with_deliver(r#"url = "ftp://x", max_attempts = 0, concurrency = 0, timeout = "0s""#)
        .unwrap_err();
    // scheme, max_attempts, concurrency, timeout (a url destination may
    // go unsigned)
    assert_eq!(err.problems.len(), 4, "{err}");
}

#[test]
fn unknown_deliver_keys_are_errors() {
    let err = with_deliver(r#"command = ["x"], retries = 3"#).unwrap_err();
    assert!(err.to_string().contains("retries"), "{err}");
}

#[test]
fn redacted_output_hides_the_signing_secret_and_a_literal_url_but_its_host() {
    let config = with_deliver(&format!(
        r#"url = "https://user:hunter2@example.com:8443/hook/tok-5e1f", signing_secret = "{WHSEC}""#
    ))
    .unwrap();
    let text = config.redacted_toml();
    for hidden in [WHSEC, "hunter2", "user:", "/hook", "tok-5e1f"] {
        assert!(!text.contains(hidden), "{hidden}: {text}");
    }
    assert!(
        text.contains("[redacted]") && text.contains(r#"url = "https://example.com:8443/…""#),
        "{text}"
    );
    let reparsed: RawConfig = toml::from_str(&text).unwrap();
    assert!(!reparsed.sources[0].deliver.is_none());
    for debug in [format!("{:?}", config.raw), format!("{config:?}")] {
        assert!(
            !debug.contains(WHSEC) && !debug.contains("tok-5e1f"),
            "{debug}"
        );
    }
}

#[test]
fn header_values_are_secrets_redacted_in_check_and_debug_and_kept_from_commands() {
    let config = with_deliver(
        r#"url = "https://example.com/hook", method = "PUT", headers = { Authorization = "Bearer lit-3f9a", "X-Key" = "env:HOOKBOX_TEST_HEADER_VAR" }"#,
    );
    // The variable is unset: the reference names it, not a value.
    let text = config.unwrap_err().to_string();
    assert!(text.contains("(env:HOOKBOX_TEST_HEADER_VAR)"), "{text}");
    let config = with_deliver(
        r#"url = "https://example.com/hook", method = "PUT", headers = { Authorization = "Bearer lit-3f9a", "X-Key" = "env:HOME" }"#,
    )
    .unwrap();
    let text = config.redacted_toml();
    assert!(!text.contains("lit-3f9a"), "{text}");
    assert!(
        text.contains("env:HOME") && text.contains(r#"method = "PUT""#),
        "{text}"
    );
    for debug in [format!("{:?}", config.raw), format!("{config:?}")] {
        assert!(!debug.contains("lit-3f9a"), "{debug}");
    }
    assert!(config.secret_env().contains(&"HOME".to_owned()));
    let Destination::Url { options, .. } = &config.sources[0].destinations[0].destination else {
        panic!()
    };
    assert_eq!(options.method, crate::config::Method::Put);
    let names: Vec<&str> = options.headers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["authorization", "x-key"]);
    assert!(options.headers.iter().all(|(_, v)| v.is_sensitive()));
}

#[test]
fn debug_output_of_the_whole_config_never_shows_a_literal_secret() {
    let config = load_str(
        r#"
        [[sources]]
        name = "github"
        kind = "github"
        secrets = ["super-secret-literal"]
        "#,
    )
    .unwrap();
    let text = format!("{config:?}");
    assert!(!text.contains("super-secret-literal"), "{text}");
}

#[test]
fn a_toml_error_shows_neither_the_source_line_nor_a_mistyped_secret() {
    // Found by the `config` fuzz target: toml's message quoted the line
    // (and serde the value) of a secret written as a string, not a list.
    let source = "[[sources]]\nname = \"a\"\nkind = \"github\"\n";
    for (rest, at) in [
        ("secrets = \"hunter2-literal\"", "line 4, column 11"),
        ("secrets = [\"hunter2-literal\", 5]", "line 4, column 31"),
        (
            "secrets = [\"x\"]\ndeliver = { url = \"https://u:hunter2@h/\", x = 1 }",
            "line 5, column 43",
        ),
    ] {
        let err = load_str(&format!("{source}{rest}\n"))
            .unwrap_err()
            .to_string();
        assert!(!err.contains("hunter2"), "{err}");
        assert!(err.contains(at), "{err}");
    }
    assert_eq!(
        hide_quoted_strings(r#"invalid type: string "a\"b", expected a sequence"#),
        "invalid type: a string, expected a sequence"
    );
}

#[test]
fn secret_env_names_every_env_reference_and_the_embedded_defaults() {
    let config = load_str(
        r#"
[admin]
token = "env:PATH"
[[sources]]
name = "a"
kind = "github"
secrets = ["literal-secret", "env:HOME", "env:PATH"]
[[sources]]
name = "off"
kind = "gitlab"
enabled = false
secrets = ["env:HOOKBOX_SURELY_UNSET_OFF"]
"#,
    )
    .unwrap();
    assert_eq!(
        config.secret_env(),
        [
            "GITHUB_WEBHOOK_SECRET",
            "HOME",
            "HOOKBOX_SURELY_UNSET_OFF",
            "PATH",
            "SHOPIFY_WEBHOOK_SECRET",
            "STANDARD_WEBHOOK_SECRET",
            "STRIPE_WEBHOOK_SECRET",
        ]
    );
}

// ------------------------------------------------------------- limits ---

/// How a step of a key path holds what follows it.
#[derive(Clone, Copy, Debug)]
enum Shape {
    Table,
    ArrayOfTables,
}

/// `{a = {b = [{c = leaf}]}}` for the path `a`, `b` (array), `c`.
fn nest(path: &[(String, Shape)], leaf: (&str, toml::Value)) -> toml::Value {
    let mut value = toml::Value::Table(toml::Table::from_iter([(leaf.0.to_owned(), leaf.1)]));
    for (name, shape) in path.iter().rev() {
        let inner = match shape {
            Shape::Table => value,
            Shape::ArrayOfTables => toml::Value::Array(vec![value]),
        };
        value = toml::Value::Table(toml::Table::from_iter([(name.clone(), inner)]));
    }
    value
}

/// Serde's complaint, if any, about `leaf` set at `path`.
fn complaint(path: &[(String, Shape)], leaf: (&str, toml::Value)) -> Option<String> {
    nest(path, leaf)
        .try_into::<RawConfig>()
        .err()
        .map(|e| e.to_string())
}

/// Every leaf key of the config types, found by asking serde: each table
/// is `deny_unknown_fields`, so an unknown key there lists the real ones.
/// Returns each key's dotted name and where it sits.
fn leaf_keys(path: &mut Vec<(String, Shape)>, out: &mut Vec<(String, Vec<(String, Shape)>)>) {
    const PROBE: &str = "__probe__";
    let message = complaint(path, (PROBE, toml::Value::Integer(1))).unwrap_or_default();
    let marker = format!("unknown field `{PROBE}`");
    let fields: Vec<String> = message
        .find(&marker)
        .map(|at| &message[at + marker.len()..])
        .and_then(|rest| rest.lines().next())
        .unwrap_or_default()
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    assert!(!fields.is_empty() || !path.is_empty(), "{message}");
    for field in fields {
        let mut table = false;
        for shape in [Shape::Table, Shape::ArrayOfTables] {
            path.push((field.clone(), shape));
            let inner = complaint(path, (PROBE, toml::Value::Integer(1)));
            if inner.is_some_and(|m| m.contains(&format!("unknown field `{PROBE}`"))) {
                leaf_keys(path, out);
                table = true;
            }
            path.pop();
            if table {
                break;
            }
        }
        if !table {
            let mut dotted: Vec<&str> = path.iter().map(|(n, _)| n.as_str()).collect();
            dotted.push(&field);
            out.push((dotted.join("."), path.clone()));
        }
    }
}

#[test]
fn every_duration_and_count_field_has_a_limit() {
    let mut keys = Vec::new();
    leaf_keys(&mut Vec::new(), &mut keys);
    let mut durations = std::collections::BTreeSet::new();
    let mut counts = std::collections::BTreeSet::new();
    for (key, path) in &keys {
        let field = key.rsplit('.').next().unwrap();
        // Only the duration fields answer a bad string with
        // `config::duration`'s own message; only integer fields take 7.
        let as_text = complaint(path, (field, toml::Value::String("soon".into())));
        if as_text.is_some_and(|m| m.contains("is not a duration")) {
            durations.insert(key.clone());
        }
        let as_number = complaint(path, (field, toml::Value::Integer(7)));
        if as_number.is_none_or(|m| !m.contains("invalid type") && !m.contains("did not match")) {
            counts.insert(key.clone());
        }
    }
    assert!(keys.len() > 50, "the probe found too few keys: {keys:?}");
    let listed: std::collections::BTreeSet<String> =
        limits::DURATIONS.iter().map(|l| l.key.to_owned()).collect();
    assert_eq!(
        durations, listed,
        "every duration field needs an entry in config::limits::DURATIONS, and nothing else"
    );
    let listed: std::collections::BTreeSet<String> = limits::COUNTS
        .iter()
        .map(|l| l.key)
        .chain(limits::IDENTIFIERS.iter().copied())
        .map(str::to_owned)
        .collect();
    assert_eq!(
        counts, listed,
        "every integer field needs an entry in config::limits::COUNTS (or IDENTIFIERS)"
    );
}

/// A config with every table that holds a duration or a count: three
/// sources, delivery and every catch-up job, TLS (ACME: checked for shape
/// only, so no files are needed).
fn full_table() -> toml::Table {
    toml::from_str(&format!(
        r#"
        [server]
        listen = "127.0.0.1:0"
        admin_listen = "127.0.0.1:0"
        [server.tls.acme]
        domains = ["hooks.example.com"]
        [retention]
        [backup]
        dir = "/var/lib/hookbox/backups"
        [search]
        [edge]
        [[sources]]
        name = "github"
        kind = "github"
        secrets = ["s"]
        max_body_bytes = 1000
        deliver = {{ url = "https://example.com/hook", signing_secret = "{WHSEC}" }}
        github_redelivery = {{ repo = "acme/shop", hook_id = 1, token = "t" }}
        [[sources]]
        name = "stripe"
        kind = "stripe"
        secrets = ["s"]
        stripe_backfill = {{ api_key = "k" }}
        deliver = {{ pull = {{ token = "pull-token-0123456789" }} }}
        [[sources]]
        name = "gitlab"
        kind = "gitlab"
        secrets = ["s"]
        gitlab_redelivery = {{ project = "acme/shop", hook_id = 1, token = "t" }}
        [[sources.deliver]]
        name = "nats"
        nats = {{ url = "nats://127.0.0.1:4222", subject = "hooks.{{source}}", credentials = "c" }}
        [[sources.deliver]]
        name = "redis"
        redis = {{ url = "redis://127.0.0.1:6379", stream = "hooks", maxlen = 1000 }}
        [[sources.deliver]]
        name = "amqp"
        amqp = {{ url = "amqp://127.0.0.1:5672/%2f", exchange = "hooks", routing_key = "{{source}}" }}
        [[sources.deliver]]
        name = "mqtt"
        mqtt = {{ url = "mqtt://127.0.0.1:1883", topic = "hooks/{{source}}", qos = 1 }}
        [[sources]]
        name = "paddle"
        kind = "paddle"
        secrets = ["s"]
        paddle_replay = {{ api_key = "k", notification_setting_id = "ntfset_01abc" }}
        [[sources]]
        name = "square"
        kind = "square"
        secrets = ["s"]
        public_url = "https://hooks.example.com/hooks/square"
        square_backfill = {{ access_token = "t" }}
        [[alerts]]
        url = "https://hooks.slack.com/services/T0/B0/x"
        format = "slack"
        "#
    ))
    .unwrap()
}

/// Sets the dotted `key` in every table of `doc` it can be in (so in
/// each source that has the key's table); false when there is none.
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
    assert!(
        set_in(doc, key, value),
        "{key}: the full config has no table for it"
    );
}

fn duration_value(d: Duration) -> toml::Value {
    toml::Value::String(humantime::format_duration(d).to_string())
}

fn count_value(n: u64) -> toml::Value {
    toml::Value::Integer(i64::try_from(n).unwrap())
}

/// The problems of `full_table()` with each `(key, value)` set.
fn problems_with(values: &[(&str, toml::Value)]) -> Vec<String> {
    let mut doc = full_table();
    for (key, value) in values {
        set(&mut doc, key, value);
    }
    match from_toml(
        &toml::to_string(&doc).unwrap(),
        "test".to_owned(),
        &crate::ingress::receive::registry::PROVIDERS,
    ) {
        Ok(_) => Vec::new(),
        Err(e) => e.problems,
    }
}

/// Keys whose smallest value is tied to another key's: at its own
/// minimum, each must stay below (or at) that other key.
fn with_partners(key: &str, value: toml::Value) -> Vec<(&str, toml::Value)> {
    let mut values = vec![(key, value.clone())];
    match key {
        "sources.deliver.backoff_base" => values.push(("sources.deliver.backoff_cap", value)),
        "sources.deliver.backoff_cap" => values.push(("sources.deliver.backoff_base", value)),
        "retention.body_days" => values.push(("retention.key_days", value)),
        "retention.key_days" => values.push(("retention.body_days", value)),
        _ => {}
    }
    values
}

#[test]
fn every_limit_accepts_its_bounds_and_refuses_one_past_them_naming_the_key() {
    assert!(problems_with(&[]).is_empty(), "{:?}", problems_with(&[]));
    let one_ns = Duration::from_nanos(1);
    let mut cases: Vec<(&str, toml::Value, Option<toml::Value>, Option<toml::Value>)> = Vec::new();
    for l in limits::DURATIONS {
        cases.push((
            l.key,
            duration_value(l.min),
            Some(duration_value(l.max)),
            Some(duration_value(l.max + one_ns)),
        ));
        if let Some(below) = l.min.checked_sub(one_ns) {
            cases.push((l.key, duration_value(below), None, None));
        }
    }
    for l in limits::COUNTS {
        cases.push((
            l.key,
            count_value(l.min),
            Some(count_value(l.max)),
            Some(count_value(l.max + 1)),
        ));
        if let Some(below) = l.min.checked_sub(1) {
            cases.push((l.key, count_value(below), None, None));
        }
    }
    for (key, value, max, over) in cases {
        let field = key.rsplit('.').next().unwrap();
        let named =
            |p: &String| p.contains(&format!(".{field}: ")) || p.starts_with(&format!("{key}: "));
        let Some(max) = max else {
            // `value` is one under the minimum.
            let p = problems_with(&with_partners(key, value.clone()));
            assert!(
                p.iter()
                    .any(|p| named(p) && p.contains("is under the minimum of")),
                "{key} = {value}: {p:?}"
            );
            continue;
        };
        for ok in [value, max] {
            let p = problems_with(&with_partners(key, ok.clone()));
            assert!(p.is_empty(), "{key} = {ok} should be accepted: {p:?}");
        }
        let over = over.unwrap();
        let p = problems_with(&with_partners(key, over.clone()));
        assert!(
            p.iter().any(named) && p.iter().all(|p| p.contains("is over the maximum of")),
            "{key} = {over}: {p:?}"
        );
    }
}

#[test]
fn absurd_durations_and_counts_are_all_refused_at_once() {
    let mut values = Vec::new();
    for l in limits::DURATIONS {
        // The review's value: it parses (under u64::MAX seconds), and
        // before the limits it panicked serve.
        values.push((l.key, toml::Value::String("300000000000y".into())));
    }
    for l in limits::COUNTS {
        // The widest value the field's type takes from TOML.
        let mut doc = full_table();
        set(&mut doc, l.key, &toml::Value::Integer(i64::MAX));
        let widest = if toml::Value::Table(doc).try_into::<RawConfig>().is_ok() {
            i64::MAX
        } else {
            i64::from(u32::MAX)
        };
        values.push((l.key, toml::Value::Integer(widest)));
    }
    let p = problems_with(&values);
    let text = p.join("\n");
    for (key, _) in &values {
        let field = key.rsplit('.').next().unwrap();
        let shown = match key.strip_prefix("sources.") {
            Some(rest)
                if rest.starts_with("stripe_backfill") || rest.starts_with("deliver.pull") =>
            {
                format!("sources[1] (\"stripe\").{rest}: ")
            }
            Some(rest) if rest.starts_with("gitlab_redelivery") => {
                format!("sources[2] (\"gitlab\").{rest}: ")
            }
            Some(rest) if rest.starts_with("deliver.redis") => format!(
                "sources[2] (\"gitlab\").deliver[1] (\"redis\").{rest}: "
            )
            .replacen("deliver.redis", "redis", 1),
            Some(rest) if rest.starts_with("deliver.mqtt") => format!(
                "sources[2] (\"gitlab\").deliver[3] (\"mqtt\").{rest}: "
            )
            .replacen("deliver.mqtt", "mqtt", 1),
            Some(rest) if rest.starts_with("paddle_replay") => {
                format!("sources[3] (\"paddle\").{rest}: ")
            }
            Some(rest) if rest.starts_with("square_backfill") => {
                format!("sources[4] (\"square\").{rest}: ")
            }
            Some(rest) => format!("sources[0] (\"github\").{rest}: "),
            None => match key.strip_prefix("alerts.") {
                Some(rest) => format!("alerts[0].{rest}: "),
                None => format!("{key}: "),
            },
        };
        assert!(
            p.iter()
                .any(|p| p.starts_with(&shown) && p.contains("is over the maximum of")),
            "{field}: no {shown:?} in:\n{text}"
        );
    }
    assert!(
        p.iter().all(|p| p.contains("is over the maximum of")),
        "only the limits should complain:\n{text}"
    );
}

#[test]
fn a_refused_duration_shows_the_value_and_the_maximum() {
    let p = problems_with(&[(
        "sources.deliver.timeout",
        toml::Value::String("40000000000y".into()),
    )]);
    assert_eq!(
        p,
        [
            "sources[0] (\"github\").deliver.timeout: 40000000000years is over the maximum of 1h",
            "sources[1] (\"stripe\").deliver.timeout: 40000000000years is over the maximum of 1h",
            "sources[2] (\"gitlab\").deliver[0] (\"nats\").timeout: 40000000000years is over the maximum of 1h",
            "sources[2] (\"gitlab\").deliver[1] (\"redis\").timeout: 40000000000years is over the maximum of 1h",
            "sources[2] (\"gitlab\").deliver[2] (\"amqp\").timeout: 40000000000years is over the maximum of 1h",
            "sources[2] (\"gitlab\").deliver[3] (\"mqtt\").timeout: 40000000000years is over the maximum of 1h",
        ]
    );
}

#[test]
fn a_timestamp_header_needs_the_timestamp_in_the_signed_payload() {
    let source = |extra: &str| {
        format!(
            "[[sources]]\nname = \"custom\"\nkind = \"hmac\"\nsecrets = [\"s\"]\n\
             [sources.hmac]\nheader = \"X-Signature\"\n{extra}"
        )
    };
    let err = load_str(&source(
        "timestamp_header = \"X-Timestamp\"\nsigned_payload = \"v1:{body}\"\n",
    ))
    .unwrap_err();
    assert_eq!(err.problems.len(), 1, "{err}");
    assert!(
        err.problems[0].starts_with(
            "sources[0] (\"custom\").hmac.signed_payload: must include {timestamp} when timestamp_header is set"
        ),
        "{err}"
    );
    // Signed, or not checked at all: both say what they do.
    for fine in [
        "timestamp_header = \"X-Timestamp\"\n",
        "timestamp_header = \"X-Timestamp\"\nsigned_payload = \"{body}|{timestamp}\"\n",
        "signed_payload = \"{body}\"\n",
        "",
    ] {
        load_str(&source(fine)).unwrap_or_else(|e| panic!("{fine}: {e}"));
    }
}

mod secret_fields;
