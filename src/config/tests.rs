use super::*;

fn load_str(text: &str) -> Result<Config, ConfigError> {
    from_toml(text, "test".to_owned())
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
    let d = config.source("github").unwrap().deliver.as_ref().unwrap();
    let Destination::Url { url, signing_key } = &d.destination else {
        panic!("expected a url destination: {d:?}");
    };
    assert_eq!(url.as_str(), "http://127.0.0.1:3000/webhooks/github");
    let expected = crate::receive::standard::key_from_secret(&Secret::new(WHSEC)).unwrap();
    assert_eq!(signing_key, &expected);
    assert_eq!(d.timeout, Duration::from_secs(30));
    assert_eq!(d.max_attempts, 12);
    assert_eq!(d.backoff_base, Duration::from_secs(30));
    assert_eq!(d.backoff_cap, Duration::from_secs(3600));
    assert_eq!(d.concurrency, 4);
    assert_eq!(d.permanent_statuses, [400, 401, 403, 404, 410, 422]);
    assert!(!format!("{d:?}").contains(&format!("{signing_key:?}")));
}

#[test]
fn the_design_inline_command_table_loads() {
    let config =
        with_deliver(r#"command = ["/usr/local/bin/on-stripe-event"], timeout = "60s""#).unwrap();
    let d = config.sources[0].deliver.as_ref().unwrap();
    assert_eq!(
        d.destination,
        Destination::Command {
            argv: vec!["/usr/local/bin/on-stripe-event".into()]
        }
    );
    assert_eq!(d.timeout, Duration::from_secs(60));
    assert_eq!(d.max_attempts, 12);
}

#[test]
fn a_source_without_deliver_has_no_destination() {
    let config =
        load_str("[[sources]]\nname = \"a\"\nkind = \"github\"\nsecrets = [\"s\"]\n").unwrap();
    assert!(config.sources[0].deliver.is_none());
}

#[test]
fn each_deliver_problem_is_reported_under_its_key() {
    let at = "sources[0] (\"github\").deliver";
    let sig = format!("signing_secret = \"{WHSEC}\"");
    for (table, needle) in [
        (String::new(), format!("{at}: set url or command")),
        (
            format!(r#"url = "http://a", command = ["x"], {sig}"#),
            format!("{at}: set url or command, not both"),
        ),
        (
            format!(r#"url = "ftp://a/x", {sig}"#),
            format!("{at}.url: the scheme"),
        ),
        (
            format!(r#"url = "not a url", {sig}"#),
            format!("{at}.url: not a URL"),
        ),
        (
            r#"url = "http://a""#.into(),
            format!("{at}.signing_secret: a url destination needs one"),
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
    // scheme, missing signing_secret, max_attempts, concurrency, timeout
    assert_eq!(err.problems.len(), 5, "{err}");
}

#[test]
fn unknown_deliver_keys_are_errors() {
    let err = with_deliver(r#"command = ["x"], retries = 3"#).unwrap_err();
    assert!(err.to_string().contains("retries"), "{err}");
}

#[test]
fn redacted_output_hides_the_signing_secret_and_a_url_password() {
    let config = with_deliver(&format!(
        r#"url = "https://user:hunter2@example.com/hook", signing_secret = "{WHSEC}""#
    ))
    .unwrap();
    let text = config.redacted_toml();
    assert!(!text.contains(WHSEC) && !text.contains("hunter2"), "{text}");
    assert!(
        text.contains("[redacted]") && text.contains("user:redacted@example.com"),
        "{text}"
    );
    let reparsed: RawConfig = toml::from_str(&text).unwrap();
    assert!(reparsed.sources[0].deliver.is_some());
    let debug = format!("{:?}", config.raw);
    assert!(!debug.contains(WHSEC), "{debug}");
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
