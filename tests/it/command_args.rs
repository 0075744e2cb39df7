//! A command destination's argv placeholders, through the running server:
//! each element is filled in from the event and stays one argument, so a
//! value that looks like an option or holds shell syntax is only data.

use crate::helpers::*;

/// Writes each of its arguments on a line of `$1/args`, as received.
const PRINT_ARGS: &str = r#"out="$1"; shift; printf '%s\n' "$@" > "$out/args""#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placeholders_are_filled_in_and_each_stays_one_argument() {
    let out = tempfile::tempdir().unwrap();
    let pwned = out.path().join("pwned");
    let destination = format!(
        r#"command = ["/bin/sh", "-c", {PRINT_ARGS:?}, "sh", {:?}, "--ref={{/ref}}", "{{/repository/full_name}}", "{{event_type}}:{{delivery_id}}@{{source}}", "{{/n}}", "{{/missing}}", "{{}}"]"#,
        out.path().display().to_string()
    );
    let app = TestApp::spawn(&deliver_source("github", &destination, "10s", 3)).await;
    let hostile = format!("-rf; touch {} #", pwned.display());
    let body = serde_json::json!({
        "ref": hostile,
        "repository": {"full_name": "acme/$(id) 'x'"},
        "n": 42,
    })
    .to_string();
    let id = post_event(
        app.addr,
        "github",
        "arg-1",
        "application/json",
        body.as_bytes(),
    )
    .await;
    wait_for_state(&app.db_path, id, "delivered").await;

    let args = std::fs::read_to_string(out.path().join("args")).unwrap();
    let args: Vec<&str> = args.lines().collect();
    assert_eq!(
        args,
        [
            format!("--ref={hostile}").as_str(),
            "acme/$(id) 'x'",
            "push:arg-1@github",
            "42",
            "",
            "{}",
        ]
    );
    assert!(!pwned.exists(), "no shell ran the value");
    app.shutdown().await;
}
