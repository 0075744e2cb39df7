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
