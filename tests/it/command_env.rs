//! What a command destination's program inherits from the real binary:
//! hookbox's own environment less every variable the config names as a
//! secret, pull tokens included (a handler running `env` once printed
//! every pull token of the config).

use crate::helpers::*;

const PULL_TOKEN: &str = "pull-token-of-the-queue-5e1f0a";
const OTHER_PULL_TOKEN: &str = "pull-token-of-another-source-77c2";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_running_env_sees_no_pull_token_of_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let seen = dir.path().join("env.txt");
    let script = format!(
        "env > {0}.tmp && mv {0}.tmp {0}",
        seen.display().to_string()
    );
    let sources = format!(
        r#"
[[sources]]
name = "github"
kind = "github"
secrets = ["{GITHUB_SECRET}"]
[[sources.deliver]]
name = "run"
command = ["/bin/sh", "-c", {script:?}]
[[sources.deliver]]
name = "queue"
pull = {{ token = "env:HOOKBOX_TEST_PULL_TOKEN" }}

[[sources]]
name = "other"
kind = "github"
secrets = ["{GITHUB_SECRET}"]
[sources.deliver]
pull = {{ token = "env:HOOKBOX_TEST_OTHER_PULL_TOKEN" }}
"#
    );
    let env = [
        ("HOOKBOX_TEST_PULL_TOKEN", PULL_TOKEN),
        ("HOOKBOX_TEST_OTHER_PULL_TOKEN", OTHER_PULL_TOKEN),
        ("HOOKBOX_TEST_NOT_SECRET", "passed-on"),
    ];
    let server =
        ChildServer::spawn_ready_with(dir.path(), &db, &sources, "", 0, &env, |_| {}).await;
    post_event(server.addr, "github", "env-1", "application/json", b"{}").await;

    let env = eventually("the command to write its environment", || {
        std::fs::read_to_string(&seen).ok()
    })
    .await;
    // The environment is hookbox's own, passed on: not an empty one.
    assert!(env.contains("HOOKBOX_TEST_NOT_SECRET=passed-on"), "{env}");
    assert!(env.contains("HOOKBOX_DESTINATION=run"), "{env}");
    for leak in [
        PULL_TOKEN,
        OTHER_PULL_TOKEN,
        "HOOKBOX_TEST_PULL_TOKEN",
        "HOOKBOX_TEST_OTHER_PULL_TOKEN",
    ] {
        assert!(!env.contains(leak), "{leak} reached the command:\n{env}");
    }
}
