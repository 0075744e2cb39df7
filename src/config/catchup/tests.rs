use std::time::Duration;

use super::super::{Config, ConfigError, from_toml};
use super::*;

fn load(sources: &str) -> Result<Config, ConfigError> {
    from_toml(
        sources,
        "test".to_owned(),
        &crate::ingress::receive::registry::PROVIDERS,
    )
}

const GITHUB: &str = r#"
[[sources]]
name = "github"
kind = "github"
secrets = ["s"]
"#;

#[test]
fn a_repo_hook_gets_every_default() {
    let config = load(&format!(
        "{GITHUB}[sources.github_redelivery]\nrepo = \"acme/shop\"\nhook_id = 5000000000\ntoken = \"ghp_literal\"\n"
    ))
    .unwrap();
    let g = config
        .source("github")
        .unwrap()
        .github_redelivery
        .as_ref()
        .unwrap();
    assert_eq!(g.interval, Duration::from_secs(3600));
    assert_eq!(g.overlap, Duration::from_secs(600));
    assert_eq!(g.pace, Duration::from_secs(1));
    assert_eq!(g.api_url, "https://api.github.com");
    assert!(g.event_types.is_empty());
    match &g.target {
        HookTarget::Repo {
            repo,
            hook_id,
            token,
        } => {
            assert_eq!(repo, "acme/shop");
            assert_eq!(*hook_id, 5_000_000_000, "hook ids are 64-bit");
            assert_eq!(token.expose(), "ghp_literal");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_org_hook_and_a_stripe_backfill_are_read() {
    let config = load(
        r#"
        [[sources]]
        name = "gh"
        kind = "github"
        secrets = ["s"]
        github_redelivery = { org = "acme", hook_id = 7, token = "t", interval = "15m", api_url = "https://ghe.example/api/v3/", event_types = ["push"] }
        [[sources]]
        name = "stripe"
        kind = "stripe"
        secrets = ["whsec_x"]
        stripe_backfill = { api_key = "rk_test_1", overlap = "1h" }
        "#,
    )
    .unwrap();
    let g = config
        .source("gh")
        .unwrap()
        .github_redelivery
        .clone()
        .unwrap();
    assert!(matches!(g.target, HookTarget::Org { ref org, hook_id: 7, .. } if org == "acme"));
    assert_eq!(
        g.api_url, "https://ghe.example/api/v3",
        "trailing / dropped"
    );
    assert_eq!(g.interval, Duration::from_secs(900));
    let s = config
        .source("stripe")
        .unwrap()
        .stripe_backfill
        .clone()
        .unwrap();
    assert_eq!(s.api_key.expose(), "rk_test_1");
    assert_eq!(s.overlap, Duration::from_secs(3600));
    assert_eq!(s.interval, Duration::from_secs(3600));
    assert_eq!(s.api_url, "https://api.stripe.com");
}

#[test]
fn every_catch_up_problem_is_reported_naming_its_key() {
    let err = load(
        r#"
        [[sources]]
        name = "a"
        kind = "github"
        secrets = ["s"]
        github_redelivery = { repo = "acme/shop", org = "acme" }
        [[sources]]
        name = "b"
        kind = "github"
        secrets = ["s"]
        github_redelivery = { repo = "not-a-repo", api_url = "ftp://x", interval = "0s" }
        [[sources]]
        name = "c"
        kind = "github"
        secrets = ["s"]
        github_redelivery = { app_id = 1, hook_id = 2, private_key = "not a pem" }
        [[sources]]
        name = "d"
        kind = "stripe"
        secrets = ["whsec_x"]
        github_redelivery = { repo = "a/b", hook_id = 1, token = "t" }
        stripe_backfill = { api_key = "env:HOOKBOX_TEST_SURELY_UNSET_STRIPE_KEY" }
        [[sources]]
        name = "e"
        kind = "github"
        secrets = ["s"]
        stripe_backfill = { api_key = "k" }
        "#,
    )
    .unwrap_err();
    let text = err.to_string();
    for needle in [
        "sources[0] (\"a\").github_redelivery: set exactly one of repo",
        "sources[1] (\"b\").github_redelivery.repo",
        "sources[1] (\"b\").github_redelivery.hook_id",
        "sources[1] (\"b\").github_redelivery.token",
        "sources[1] (\"b\").github_redelivery.api_url",
        "sources[1] (\"b\").github_redelivery.interval",
        "sources[2] (\"c\").github_redelivery.hook_id: not used with app_id",
        "sources[2] (\"c\").github_redelivery.private_key ([redacted]): not an RSA private key",
        "sources[3] (\"d\").github_redelivery: only for kind \"github\"",
        "sources[3] (\"d\").stripe_backfill.api_key (env:HOOKBOX_TEST_SURELY_UNSET_STRIPE_KEY)",
        "sources[4] (\"e\").stripe_backfill: only for kind \"stripe\"",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    assert!(!text.contains("not a pem"), "a literal key leaked:\n{text}");
}

#[test]
fn unknown_catch_up_keys_are_errors() {
    let err = load(&format!(
        "{GITHUB}[sources.github_redelivery]\nrepo = \"a/b\"\nhook_id = 1\ntoken = \"t\"\nintervall = \"1h\"\n"
    ))
    .unwrap_err();
    assert!(err.to_string().contains("intervall"), "{err}");
}

#[test]
fn check_output_and_debug_never_show_catch_up_secrets() {
    let config = load(
        r#"
        [[sources]]
        name = "github"
        kind = "github"
        secrets = ["s"]
        github_redelivery = { repo = "a/b", hook_id = 1, token = "ghp_supersecret" }
        [[sources]]
        name = "stripe"
        kind = "stripe"
        secrets = ["whsec_x"]
        stripe_backfill = { api_key = "rk_live_supersecret" }
        "#,
    )
    .unwrap();
    let printed = config.redacted_toml();
    let debug = format!("{config:?}");
    for secret in ["ghp_supersecret", "rk_live_supersecret"] {
        assert!(!printed.contains(secret), "{printed}");
        assert!(!debug.contains(secret), "{debug}");
    }
    assert!(printed.contains("repo = \"a/b\""), "{printed}");
    assert!(printed.contains("api_key = \"[redacted]\""), "{printed}");
}

#[test]
fn an_app_hook_needs_a_readable_rsa_key() {
    let err = load(&format!(
        "{GITHUB}[sources.github_redelivery]\napp_id = \"Iv1.abc\"\n"
    ))
    .unwrap_err();
    assert!(
        err.to_string().contains("private_key: app_id needs"),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("app.pem");
    let made = std::process::Command::new("openssl")
        .args(["genrsa", "-traditional", "-out"])
        .arg(&pem)
        .arg("2048")
        .output();
    if !made.is_ok_and(|o| o.status.success()) {
        eprintln!("skipping the valid-key half: openssl cannot generate a key here");
        return;
    }
    let config = load(&format!(
        "{GITHUB}[sources.github_redelivery]\napp_id = 42\nprivate_key = \"file:{}\"\n",
        pem.display()
    ))
    .unwrap();
    let g = config
        .source("github")
        .unwrap()
        .github_redelivery
        .clone()
        .unwrap();
    assert!(matches!(
        g.target,
        HookTarget::App {
            app_id: AppId::Number(42),
            ..
        }
    ));
    assert!(config.redacted_toml().contains("file:"));
}

const GITLAB: &str = r#"
[[sources]]
name = "gitlab"
kind = "gitlab"
secrets = ["s"]
"#;

fn gitlab(table: &str) -> Result<GitlabRedeliveryConfig, ConfigError> {
    let config = load(&format!("{GITLAB}gitlab_redelivery = {{ {table} }}\n"))?;
    Ok(config
        .source("gitlab")
        .unwrap()
        .gitlab_redelivery
        .clone()
        .unwrap())
}

#[test]
fn a_gitlab_project_hook_gets_every_default_and_its_path_encoded() {
    let g = gitlab(r#"project = "acme/tools/shop", hook_id = 9, token = "glpat-literal""#).unwrap();
    assert_eq!(
        g.parent,
        GitlabParent::Project("acme%2Ftools%2Fshop".into())
    );
    assert_eq!(g.hook_path(), "/projects/acme%2Ftools%2Fshop/hooks/9");
    assert_eq!(g.token.expose(), "glpat-literal");
    assert_eq!(g.api_url, "https://gitlab.com/api/v4");
    assert_eq!(g.interval, Duration::from_secs(3600));
    assert_eq!(g.overlap, Duration::from_secs(600));
    assert_eq!(g.resend_limit, 5, "GitLab's own limit");
    assert_eq!(g.resend_window, Duration::from_secs(60));
    assert!(g.event_types.is_empty());

    for (written, id) in [
        ("project = 42", "/projects/42/"),
        (r#"project = "42""#, "/projects/42/"),
        (r#"project = "acme%2Fshop""#, "/projects/acme%2Fshop/"),
        ("group = 7", "/groups/7/"),
        (r#"group = "acme/platform""#, "/groups/acme%2Fplatform/"),
    ] {
        let g = gitlab(&format!(r#"{written}, hook_id = 3, token = "t""#)).unwrap();
        assert!(
            g.hook_path().starts_with(id),
            "{written}: {}",
            g.hook_path()
        );
    }
    let g = gitlab(
        r#"group = "acme", hook_id = 3, token = "t", api_url = "https://git.example.com/api/v4/", resend_limit = 50, resend_window = "10s", event_types = ["Push Hook"]"#,
    )
    .unwrap();
    assert_eq!(g.api_url, "https://git.example.com/api/v4");
    assert_eq!(
        (g.resend_limit, g.resend_window),
        (50, Duration::from_secs(10))
    );
    assert_eq!(g.event_types, ["Push Hook"]);
}

#[test]
fn every_gitlab_catch_up_problem_is_reported_naming_its_key() {
    let err = load(
        r#"
        [[sources]]
        name = "both"
        kind = "gitlab"
        secrets = ["s"]
        gitlab_redelivery = { project = 1, group = 2, hook_id = 1, token = "t" }
        [[sources]]
        name = "neither"
        kind = "gitlab"
        secrets = ["s"]
        gitlab_redelivery = { hook_id = 1, token = "t" }
        [[sources]]
        name = "bad"
        kind = "gitlab"
        secrets = ["s"]
        gitlab_redelivery = { project = "acme/../etc", hook_id = 0, api_url = "ftp://x", resend_limit = 0, resend_window = "0s", interval = "8d" }
        [[sources]]
        name = "gh"
        kind = "github"
        secrets = ["s"]
        gitlab_redelivery = { project = 1, hook_id = 1, token = "glpat-supersecret" }
        [[sources]]
        name = "unset"
        kind = "gitlab"
        secrets = ["s"]
        gitlab_redelivery = { group = -4, hook_id = 1, token = "env:HOOKBOX_TEST_SURELY_UNSET_GITLAB_TOKEN" }
        "#,
    )
    .unwrap_err();
    let text = err.to_string();
    for needle in [
        "sources[0] (\"both\").gitlab_redelivery: set exactly one of project or group",
        "sources[1] (\"neither\").gitlab_redelivery: set exactly one of project or group",
        "sources[2] (\"bad\").gitlab_redelivery.project: a numeric id or a full path",
        "sources[2] (\"bad\").gitlab_redelivery.hook_id: must be a positive number",
        "sources[2] (\"bad\").gitlab_redelivery.token: needed",
        "sources[2] (\"bad\").gitlab_redelivery.api_url",
        "sources[2] (\"bad\").gitlab_redelivery.resend_limit: 0 is under the minimum",
        "sources[2] (\"bad\").gitlab_redelivery.resend_window",
        "sources[2] (\"bad\").gitlab_redelivery.interval",
        "sources[3] (\"gh\").gitlab_redelivery: only for kind \"gitlab\"",
        "sources[4] (\"unset\").gitlab_redelivery.group: an id must be a positive number",
        "sources[4] (\"unset\").gitlab_redelivery.token (env:HOOKBOX_TEST_SURELY_UNSET_GITLAB_TOKEN)",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    assert!(!text.contains("glpat-supersecret"), "{text}");
}

#[test]
fn check_output_and_debug_never_show_the_gitlab_token() {
    let config =
        load(&format!("{GITLAB}gitlab_redelivery = {{ project = \"a/b\", hook_id = 1, token = \"glpat-supersecret\" }}\n"))
            .unwrap();
    let printed = config.redacted_toml();
    let debug = format!("{config:?}");
    assert!(!printed.contains("glpat-supersecret"), "{printed}");
    assert!(!debug.contains("glpat-supersecret"), "{debug}");
    assert!(printed.contains("project = \"a/b\""), "{printed}");
    let with_env = load(&format!(
        "{GITLAB}gitlab_redelivery = {{ project = 1, hook_id = 1, token = \"env:HOOKBOX_TEST_GITLAB_TOKEN_NAME\" }}\n"
    ));
    // The variable is unset, so loading fails; the reference is still named.
    let text = with_env.unwrap_err().to_string();
    assert!(text.contains("HOOKBOX_TEST_GITLAB_TOKEN_NAME"), "{text}");
}
