//! SIGTERM while a command destination runs: the real binary gives the
//! attempt the shutdown grace, then kills the command's whole process
//! group before it exits (outside systemd's cgroup nothing else would),
//! and records the attempt as interrupted, so the delivery runs again
//! after the restart, and only then.

use std::time::{Duration, Instant};

use crate::helpers::*;

/// The first run notes its shell's and its child's pids and hangs; any
/// later one succeeds at once.
const HANDLER: &str = r#"
out="$1"
n=$(cat "$out/count" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" > "$out/count"
if [ "$n" -eq 1 ]; then
  sleep 60 &
  echo $! > "$out/sleep.pid"
  echo $$ > "$out/shell.pid"
  wait
fi
exit 0
"#;

fn alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_kills_a_running_command_s_group_and_records_the_attempt_as_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let script = dir.path().join("handler.sh");
    std::fs::write(&script, HANDLER).unwrap();
    let destination = format!(
        "command = [\"/bin/sh\", {:?}, {:?}]",
        script.display().to_string(),
        out.display().to_string()
    );
    let sources = deliver_source("github", &destination, "5m", 5);
    let mut server = ChildServer::spawn_ready(dir.path(), &db, &sources, "", 0).await;
    let id = post_event(server.addr, "github", "long-1", "application/json", b"{}").await;
    let pids: Vec<i32> = eventually("the command to note its pids", || {
        ["shell.pid", "sleep.pid"]
            .iter()
            .map(|name| {
                std::fs::read_to_string(out.join(name))
                    .ok()?
                    .trim()
                    .parse()
                    .ok()
            })
            .collect()
    })
    .await;
    // Killed at the end of the test whatever happens.
    struct Reap(Vec<i32>);
    impl Drop for Reap {
        fn drop(&mut self) {
            for pid in &self.0 {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(*pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
    let _reap = Reap(pids.clone());
    assert!(pids.iter().all(|&pid| alive(pid)));

    let stopping = Instant::now();
    assert!(server.terminate(Duration::from_secs(30)).await.success());
    let took = stopping.elapsed();
    // The grace was given (the command might have finished in it).
    assert!(took >= Duration::from_secs(9), "stopped after {took:?}");
    eventually("the command's group to be gone", || {
        pids.iter().all(|&pid| !alive(pid)).then_some(())
    })
    .await;

    let rows = attempt_rows(&db, id);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].attempt, 1);
    assert_eq!(rows[0].outcome, "retry");
    assert_eq!(
        rows[0].error.as_deref(),
        Some("interrupted: hookbox stopped during the attempt")
    );
    let row = event_row(&db, id);
    assert_eq!(row.state, "pending");
    assert_eq!(row.attempts, 1, "the interrupted attempt counts");
    assert_eq!(row.lease_until, None);

    // After the restart the delivery runs again, as attempt 2.
    let _server = ChildServer::spawn_ready(dir.path(), &db, &sources, "", 1).await;
    wait_for_state(&db, id, "delivered").await;
    assert_eq!(
        outcomes(&db, id),
        [
            (1, "retry".to_owned(), None),
            (2, "delivered".to_owned(), None)
        ]
    );
    assert_eq!(std::fs::read_to_string(out.join("count")).unwrap(), "2\n");
}
