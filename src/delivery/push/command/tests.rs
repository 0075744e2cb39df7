//! With real child processes. The tests use `sh -c` to build handlers; the
//! destination itself never runs a shell.

use std::path::Path;

use bytes::Bytes;

use super::*;

const SECS: Duration = Duration::from_secs(10);
const RETRY: Outcome = Outcome::Retry { retry_after: None };

fn job(body: impl Into<Bytes>) -> Job {
    Job {
        event_id: 42,
        source: "stripe".into(),
        destination: "default".into(),
        delivery_id: "evt_1NG8Du2eZvKYlo2CUI79vXWy".into(),
        received_at: 1_700_000_000_000,
        event_type: Some("invoice.paid".into()),
        content_type: Some("application/json".into()),
        headers: serde_json::Map::new(),
        body: body.into(),
        attempt: 2,
    }
}

fn sh(script: &str, args: &[&Path]) -> Vec<String> {
    let mut argv = vec!["sh".to_owned(), "-c".to_owned(), script.to_owned()];
    argv.extend(args.iter().map(|p| p.display().to_string()));
    argv
}

async fn run(argv: Vec<String>, timeout: Duration, body: impl Into<Bytes>) -> Attempt {
    CommandDestination::new(Template::parse(&argv).unwrap(), timeout, Arc::from([]))
        .deliver(&job(body))
        .await
}

/// Alive and not a zombie (an orphan's zombie waits for init to reap it).
fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    state != Some('Z')
}

#[tokio::test]
async fn exit_zero_is_delivered_and_other_exits_are_retried_with_stderr() {
    let ok = run(sh("exit 0", &[]), SECS, "{}").await;
    assert_eq!(
        (ok.outcome, ok.status, ok.error),
        (Outcome::Delivered, None, None)
    );

    let failed = run(
        sh("echo out; echo 'no database' >&2; exit 3", &[]),
        SECS,
        "{}",
    )
    .await;
    assert_eq!(failed.outcome, RETRY);
    assert_eq!(failed.error.as_deref(), Some("exit status 3: no database"));

    let quiet = run(sh("echo only stdout; exit 4", &[]), SECS, "{}").await;
    assert_eq!(quiet.error.as_deref(), Some("exit status 4: only stdout"));

    let signalled = run(sh("kill -TERM $$", &[]), SECS, "{}").await;
    assert_eq!(signalled.error.as_deref(), Some("killed by signal 15"));
}

#[tokio::test]
async fn argv_is_run_without_a_shell() {
    let attempt = run(vec!["true; exit 3".into()], SECS, "{}").await;
    assert_eq!(attempt.outcome, RETRY);
    let error = attempt.error.unwrap();
    assert!(error.starts_with("cannot start true; exit 3: "), "{error}");
}

#[tokio::test]
async fn the_body_arrives_intact_on_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("body");
    // Larger than a pipe buffer, with every byte value.
    let body: Vec<u8> = (0..=255u8).cycle().take(1 << 20).collect();
    let attempt = run(sh("cat > \"$0\"", &[&file]), SECS, body.clone()).await;
    assert_eq!(attempt.outcome, Outcome::Delivered, "{attempt:?}");
    assert_eq!(std::fs::read(&file).unwrap(), body);
}

#[tokio::test]
async fn the_event_is_described_in_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("env");
    let script = "printf '%s|%s|%s|%s|%s' \"$HOOKBOX_SOURCE\" \"$HOOKBOX_EVENT_TYPE\" \
                  \"$HOOKBOX_DELIVERY_ID\" \"$HOOKBOX_EVENT_ID\" \"$HOOKBOX_ATTEMPT\" > \"$0\"";
    let attempt = run(sh(script, &[&file]), SECS, "{}").await;
    assert_eq!(attempt.outcome, Outcome::Delivered, "{attempt:?}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "stripe|invoice.paid|evt_1NG8Du2eZvKYlo2CUI79vXWy|42|2"
    );
}

#[tokio::test]
async fn a_child_that_ignores_stdin_does_not_stall_us() {
    let big = vec![b'x'; 1 << 20];
    let exits = run(vec!["true".into()], SECS, big.clone()).await;
    assert_eq!(exits.outcome, Outcome::Delivered, "{exits:?}");

    let hangs = run(
        vec!["sleep".into(), "30".into()],
        Duration::from_millis(300),
        big,
    )
    .await;
    assert_eq!(hangs.outcome, RETRY);
    assert_eq!(hangs.error.as_deref(), Some("timed out after 300ms"));
    assert!(hangs.duration < Duration::from_secs(3), "{hangs:?}");
}

#[tokio::test]
async fn the_timeout_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = "sleep 30 & echo $! > \"$0\"; echo started >&2; wait";
    let attempt = run(sh(script, &[&pidfile]), Duration::from_millis(500), "{}").await;
    assert_eq!(attempt.outcome, RETRY);
    assert_eq!(
        attempt.error.as_deref(),
        Some("timed out after 500ms: started")
    );
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while alive(pid) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!alive(pid), "grandchild {pid} survived the timeout");
}

#[tokio::test]
async fn output_is_bounded_and_read_to_the_end() {
    let script = "head -c 1000000 /dev/zero | tr '\\0' y; \
                  head -c 1000000 /dev/zero | tr '\\0' z >&2; exit 1";
    let attempt = run(sh(script, &[]), SECS, "{}").await;
    assert_eq!(attempt.outcome, RETRY);
    let error = attempt.error.unwrap();
    assert!(error.len() <= BYTES_MAX, "{}", error.len());
    assert!(error.starts_with("exit status 1: zzzz") && error.ends_with('…'));
}

#[tokio::test]
async fn a_background_grandchild_holding_the_pipes_does_not_hold_the_attempt() {
    let attempt = run(sh("sleep 2 & exit 0", &[]), SECS, "{}").await;
    assert_eq!(attempt.outcome, Outcome::Delivered);
    assert!(attempt.duration < Duration::from_secs(1), "{attempt:?}");
}

#[tokio::test]
async fn an_abandoned_attempt_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = "sleep 30 & echo $! > \"$0\"; wait";
    let argv = Template::parse(&sh(script, &[&pidfile])).unwrap();
    let destination = CommandDestination::new(argv, SECS, Arc::from([]));
    let job = job("{}");
    let abandoned = tokio::time::timeout(Duration::from_millis(500), destination.deliver(&job));
    assert!(
        abandoned.await.is_err(),
        "the attempt should still be running"
    );
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while alive(pid) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!alive(pid), "grandchild {pid} survived the dropped attempt");
}

#[tokio::test]
async fn arguments_an_event_made_that_cannot_be_passed_make_it_dead_not_retried() {
    let argv = |arg: &str| vec!["/bin/true".to_owned(), arg.to_owned()];
    let nul = run(argv("{/x}"), SECS, r#"{"x": "a\u0000b"}"#).await;
    assert_eq!(nul.outcome, Outcome::Dead);
    let error = nul.error.unwrap();
    assert!(error.contains("a NUL byte"), "{error}");
    let huge = format!(r#"{{"x": "{}"}}"#, "a".repeat(256 * 1024));
    let long = run(argv("{/x}"), SECS, huge).await;
    assert_eq!(long.outcome, Outcome::Dead);
    let error = long.error.unwrap();
    assert!(error.contains("too long"), "{error}");
    assert!(error.len() < 200, "the value is not in the error: {error}");
}
