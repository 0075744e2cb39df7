//! The `hookbox` binary's verbs that do not serve: `check`, `replay`, and
//! the others that only read or copy the database; and its global
//! `--log-format`.

use crate::helpers::hookbox;

#[test]
fn check_prints_the_effective_config_with_secrets_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hookbox.toml");
    std::fs::write(
        &path,
        r#"
[[sources]]
name = "github"
kind = "github"
secrets = ["a-literal-secret-value", "env:HOOKBOX_TEST_CLI_SECRET"]
"#,
    )
    .unwrap();
    let out = hookbox()
        .args(["check", "--config"])
        .arg(&path)
        .env("HOOKBOX_TEST_CLI_SECRET", "the-env-secret-value")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("listen = \"0.0.0.0:8080\""), "{stdout}");
    assert!(stdout.contains("env:HOOKBOX_TEST_CLI_SECRET"), "{stdout}");
    assert!(stdout.contains("[redacted]"), "{stdout}");
    for secret in ["a-literal-secret-value", "the-env-secret-value"] {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "{secret} leaked"
        );
    }
}

#[test]
fn check_reports_every_problem_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hookbox.toml");
    std::fs::write(
        &path,
        r#"
[[sources]]
name = "github"
kind = "github"
secrets = ["env:HOOKBOX_TEST_CLI_UNSET"]

[[sources]]
name = "stripe"
kind = "stripe"
secrets = []
"#,
    )
    .unwrap();
    let out = hookbox()
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("sources[0] (\"github\").secrets[0] (env:HOOKBOX_TEST_CLI_UNSET)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("sources[1] (\"stripe\").secrets"),
        "{stderr}"
    );
}

#[test]
fn the_embedded_default_enables_a_source_when_its_secret_is_set() {
    let out = hookbox()
        .arg("check")
        .env("GITHUB_WEBHOOK_SECRET", "from-env")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if std::path::Path::new(hookbox::config::SYSTEM_CONFIG).exists() {
        eprintln!(
            "skipping: {} exists on this machine",
            hookbox::config::SYSTEM_CONFIG
        );
        return;
    }
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("embedded default"), "{stdout}");
    assert!(stdout.contains("name = \"github\""), "{stdout}");
    assert!(!stdout.contains("name = \"stripe\""), "{stdout}");
    assert!(!stdout.contains("from-env"), "{stdout}");
}

#[test]
fn commands_that_only_read_the_database_need_no_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hookbox.toml");
    // Every secret is a systemd credential, and there is no
    // $CREDENTIALS_DIRECTORY: as `sudo hookbox …` outside the unit.
    std::fs::write(
        &config,
        format!(
            "[server]\ndatabase = {:?}\n[admin]\ntoken = \"cred:admin-token\"\n\
             [[sources]]\nname = \"github\"\nkind = \"github\"\nsecrets = [\"cred:github\"]\n\
             [sources.deliver]\nurl = \"https://example.test/hook\"\nsigning_secret = \"cred:signing\"\n\
             [sources.github_redelivery]\ntoken = \"cred:github-token\"\nhook_id = 1\nrepo = \"o/r\"\n\
             [[sources]]\nname = \"queue\"\nkind = \"github\"\nsecrets = [\"cred:github\"]\n\
             [sources.deliver]\npull = {{ token = \"cred:pull-token\" }}\n",
            dir.path().join("hookbox.db").display().to_string()
        ),
    )
    .unwrap();
    let mut conn = rusqlite::Connection::open(dir.path().join("hookbox.db")).unwrap();
    hookbox::store::schema::apply(&mut conn).unwrap();
    drop(conn);
    let run = |args: &[&str]| {
        hookbox()
            .args(args)
            .arg("--config")
            .arg(&config)
            .env_remove("CREDENTIALS_DIRECTORY")
            .output()
            .unwrap()
    };
    let check = run(&["check"]);
    assert_eq!(check.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert!(
        stderr.contains("$CREDENTIALS_DIRECTORY is not set"),
        "{stderr}"
    );

    let events = run(&["events"]);
    assert!(events.status.success(), "{events:?}");
    let backup = dir.path().join("copy.db");
    let out = run(&["backup", backup.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    assert!(backup.exists());
    let out = run(&["replay", "--dead"]);
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn log_format_json_writes_one_json_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hookbox.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\ndatabase = {:?}\n\
             [[sources]]\nname = \"github\"\nkind = \"github\"\nsecrets = [\"json-log-secret\"]\n",
            dir.path().join("hookbox.db").display().to_string()
        ),
    )
    .unwrap();
    let log = dir.path().join("hookbox.log");
    let mut child = hookbox()
        .args(["--log-format", "json", "serve", "--config"])
        .arg(&config)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains(r#""message":"ready""#)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "never ready: {}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    assert!(child.wait().unwrap().success());
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    assert!(lines.len() >= 3, "{text}");
    for line in &lines {
        assert!(line["timestamp"].is_string(), "{line}");
        assert!(line["level"].is_string(), "{line}");
        assert!(line["fields"]["message"].is_string(), "{line}");
    }
    let ready = lines
        .iter()
        .find(|l| l["fields"]["message"] == "ready")
        .unwrap();
    assert!(ready["fields"]["public"].is_string(), "{ready}");
}

/// Runs `hookbox check` on `config`, requires exit 2, returns stderr.
fn check_refuses(config: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hookbox.toml");
    std::fs::write(&path, config).unwrap();
    let out = hookbox()
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    stderr
}

#[test]
fn check_refuses_a_generic_hmac_timestamp_that_is_not_signed() {
    let stderr = check_refuses(
        r#"
[[sources]]
name = "custom"
kind = "hmac"
secrets = ["a-literal-hmac-secret"]
[sources.hmac]
header = "X-Signature"
timestamp_header = "X-Timestamp"
signed_payload = "{body}"
"#,
    );
    assert!(
        stderr.contains(
            "sources[0] (\"custom\").hmac.signed_payload: must include {timestamp} when timestamp_header is set"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("a-literal-hmac-secret"), "{stderr}");
}

#[test]
fn check_explains_a_bad_pointer_in_a_command_argument() {
    let stderr = check_refuses(
        r#"
[[sources]]
name = "github"
kind = "github"
secrets = ["s"]
deliver = { command = ["/usr/local/bin/deploy", "{/ref~2}"] }
"#,
    );
    assert!(
        stderr.contains(
            r#"sources[0] ("github").deliver.command[1]: {/ref~2} is not a JSON pointer"#
        ),
        "{stderr}"
    );
}
