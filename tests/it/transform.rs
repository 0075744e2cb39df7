//! `transform`, and url destinations without Standard Webhooks, through the
//! real binary: `hookbox serve` delivering to a recording downstream or a
//! real command, `hookbox check` judging programs. Expected outputs are
//! written out by hand from jq's semantics, not computed by jaq.

use std::time::{Duration, Instant};

use crate::helpers::*;

/// A GitHub source whose `[[sources.deliver]]` tables are `destinations`.
fn source(destinations: &str) -> String {
    format!(
        r#"
[[sources]]
name = "github"
kind = "github"
secrets = ["{GITHUB_SECRET}"]
{destinations}
"#
    )
}

/// A destination table named `name` with quick retries and `lines`.
fn destination(name: &str, lines: &str) -> String {
    format!(
        "[[sources.deliver]]\nname = \"{name}\"\ntimeout = \"5s\"\nmax_attempts = 3\n\
         backoff_base = \"50ms\"\nbackoff_cap = \"200ms\"\n{lines}\n"
    )
}

/// POSTs a signed GitHub event of type `event` and returns its row id.
async fn post(addr: std::net::SocketAddr, delivery: &str, event: &str, body: &[u8]) -> i64 {
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/hooks/github"))
        .header("content-type", "application/json")
        .header("x-github-event", event)
        .header("x-github-delivery", delivery)
        .header("x-hub-signature-256", github_signature(GITHUB_SECRET, body))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "posting {delivery}");
    json(r).await["id"].as_i64().unwrap()
}

/// `(state, attempts, last_error)` of event `id`'s delivery to `name`.
fn delivery(db: &std::path::Path, id: i64, name: &str) -> (String, i64, Option<String>) {
    open(db)
        .query_row(
            "SELECT state, attempts, last_error FROM deliveries WHERE event_id = ?1 AND destination = ?2",
            rusqlite::params![id, name],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap()
}

/// Waits until event `id`'s delivery to `name` is in `state`.
async fn settled(db: &std::path::Path, id: i64, name: &str, state: &str) -> (i64, Option<String>) {
    eventually(&format!("{name} of event {id} to be {state}"), || {
        let (now, attempts, error) = delivery(db, id, name);
        (now == state).then_some((attempts, error))
    })
    .await
}

const PUSH: &[u8] =
    br#"{"ref": "refs/heads/main", "repository": {"full_name": "acme/widgets", "private": false},
  "commits": [{"id": "c1", "message": "fix"}, {"id": "c2", "message": "caf\u00e9"}],
  "pusher": {"name": "octo"}, "n": 1.50}"#;

/// What `CHAT` makes of [`PUSH`], by jq's rules: keys in the order built,
/// compact, `\(...)` interpolating strings as they are and numbers as
/// written, non-ASCII text as UTF-8.
const CHAT_OUTPUT: &str =
    r#"{"content":"octo pushed 2 commits to acme/widgets: fix, café","event":"push","n":1.50}"#;

const CHAT: &str = r#"select(.ref == "refs/heads/main")
  | {content: "\(.pusher.name) pushed \(.commits | length) commits to \(.repository.full_name): \([.commits[].message] | join(", "))",
     event: $event.event_type, n: .n}"#;

const TOKEN: &str = "chat-token-7c1d9e0b42aa";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transform_sends_its_output_unsigned_with_secret_headers_and_skips_what_it_drops() {
    let down = Downstream::start(|_, _| Reply::status(204)).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let url = down.url();
    let sources = source(&format!(
        "{}{}",
        destination(
            "chat",
            &format!(
                "url = \"{url}\"\ntransform = '''\n{CHAT}\n'''\n\
                 headers = {{ Authorization = \"env:CHAT_TOKEN\", \"X-Team\" = \"ops\" }}"
            )
        ),
        destination(
            "note",
            &format!(
                "url = \"{url}\"\nmethod = \"PUT\"\n\
                 transform = '\"\\($event.source)/\\($event.destination): \\(.repository.full_name) at \\($event.received_at | fromdate | . > 0)\"'"
            )
        ),
    ));
    let mut server = ChildServer::spawn_ready_with(
        dir.path(),
        &db,
        &sources,
        "",
        0,
        &[("CHAT_TOKEN", TOKEN), ("RUST_LOG", "hookbox=debug")],
        |_| {},
    )
    .await;

    let pushed = post(server.addr, "guid-push", "push", PUSH).await;
    let other = post(
        server.addr,
        "guid-tag",
        "push",
        br#"{"ref": "refs/tags/v1", "repository": {"full_name": "acme/widgets"}}"#,
    )
    .await;
    settled(&db, pushed, "chat", "delivered").await;
    settled(&db, pushed, "note", "delivered").await;
    settled(&db, other, "note", "delivered").await;
    // The select dropped the tag: skipped, no attempt made or counted.
    let (attempts, error) = settled(&db, other, "chat", "skipped").await;
    assert_eq!((attempts, error), (0, None));
    assert_eq!(event_row(&db, other).state, "delivered");
    assert!(outcomes(&db, other).iter().all(|(_, o, _)| o != "skipped"));

    let hits = down.wait_for_hits(3).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(down.hits().len(), 3, "nothing is sent for a skip");
    let chat: Vec<_> = hits.iter().filter(|h| h.method == "POST").collect();
    assert_eq!(chat.len(), 1);
    assert_eq!(std::str::from_utf8(&chat[0].body).unwrap(), CHAT_OUTPUT);
    assert_eq!(chat[0].header("content-type"), "application/json");
    assert_eq!(chat[0].header("authorization"), TOKEN);
    assert_eq!(chat[0].header("x-team"), "ops");
    for signed in ["webhook-id", "webhook-signature", "webhook-timestamp"] {
        assert!(
            chat[0].headers.get(signed).is_none(),
            "{signed} sent unsigned"
        );
    }
    let mut notes: Vec<String> = hits
        .iter()
        .filter(|h| h.method == "PUT")
        .map(|h| {
            assert_eq!(h.header("content-type"), "text/plain; charset=utf-8");
            assert!(h.headers.get("authorization").is_none());
            String::from_utf8(h.body.to_vec()).unwrap()
        })
        .collect();
    notes.sort();
    assert_eq!(
        notes,
        [
            "github/note: acme/widgets at true",
            "github/note: acme/widgets at true"
        ]
    );

    let metrics = server.metrics().await;
    assert!(
        metrics.contains(
            r#"hookbox_dispatch_attempts_total{source="github",destination="chat",outcome="skipped"} 1"#
        ),
        "{metrics}"
    );
    let stats = json(server.admin_get("/api/stats").await).await;
    assert_eq!(stats["sources"][0]["destinations"]["chat"]["skipped"], 1);
    let listed = json(
        server
            .admin_get("/api/events?source=github&destination=chat&state=skipped")
            .await,
    )
    .await;
    let ids: Vec<i64> = listed["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [other]);

    // `try` shows exactly what was sent, and sends nothing.
    let tried = json(
        server
            .admin_post(
                "/api/try",
                serde_json::json!({"source": "github", "destination": "chat", "last": 5}),
            )
            .await,
    )
    .await;
    let trials = tried["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 2, "{tried}");
    assert_eq!(
        (
            &trials[0]["event_id"],
            &trials[0]["outcome"],
            &trials[0]["matches"]
        ),
        (
            &serde_json::json!(other),
            &serde_json::json!("skipped"),
            &serde_json::json!(true)
        )
    );
    let request = &trials[1]["request"];
    assert_eq!(request["body"], CHAT_OUTPUT, "{tried}");
    assert_eq!(
        (&request["method"], &request["url"]),
        (
            &serde_json::json!("POST"),
            &serde_json::json!(format!("http://{}/…", down.addr))
        )
    );
    let headers: Vec<(String, String)> =
        serde_json::from_value(request["headers"].clone()).unwrap();
    assert!(
        headers.contains(&("authorization".into(), "[redacted]".into())),
        "{headers:?}"
    );
    assert!(
        headers.contains(&("content-type".into(), "application/json".into())),
        "{headers:?}"
    );
    assert!(
        !headers.iter().any(|(n, _)| n.starts_with("webhook-")),
        "{headers:?}"
    );
    assert!(!tried.to_string().contains(TOKEN));
    // The CLI, on a config of its own naming the same database, without
    // the secret in its environment: the same body.
    let out = hookbox()
        .args(["try", "github", "chat", "--json", "--event"])
        .arg(pushed.to_string())
        .arg("--config")
        .arg(dir.path().join("hookbox.toml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(line["request"]["body"], CHAT_OUTPUT);
    assert_eq!(
        &line["request"]["body"].as_str().unwrap().as_bytes(),
        &&chat[0].body[..]
    );
    let out = hookbox()
        .args(["try", "github", "note", "--last", "1", "--config"])
        .arg(dir.path().join("hookbox.toml"))
        .output()
        .unwrap();
    let shown = text(&out);
    assert!(shown.contains("would send\n  PUT "), "{shown}");
    assert!(
        shown.contains("\n\ngithub/note: acme/widgets at true\n"),
        "{shown}"
    );
    // The dashboard's Try page shows the same, from a Try link.
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let cookie = dashboard_cookie(server.admin_url("/login")).await;
    let page = |path: &str| {
        browser
            .get(server.admin_url(path))
            .header("cookie", &cookie)
            .send()
    };
    let overview = page("/").await.unwrap().text().await.unwrap();
    assert!(
        overview.contains("href=\"/destinations/github/chat/try\""),
        "{overview}"
    );
    let tried = page("/destinations/github/chat/try?last=5").await.unwrap();
    assert_eq!(tried.status(), 200);
    let tried = tried.text().await.unwrap();
    assert!(
        tried.contains("would send") && tried.contains("skipped"),
        "{tried}"
    );
    assert!(
        tried.contains(&CHAT_OUTPUT.replace('"', "&quot;")),
        "{tried}"
    );
    assert!(tried.contains("authorization: [redacted]") && !tried.contains(TOKEN));
    assert_eq!(down.hits().len(), 3, "try sent something");

    server.terminate(Duration::from_secs(10)).await;
    let log = server.output();
    assert!(
        log.contains("skipped"),
        "the debug log names the skip:\n{log}"
    );
    assert!(
        !log.contains(TOKEN),
        "the header's secret reached the log:\n{log}"
    );
    // `check` shows the reference, never the value, and warns of no signing.
    let out = hookbox()
        .env("CHAT_TOKEN", TOKEN)
        .args(["check", "--config"])
        .arg(dir.path().join("hookbox.toml"))
        .output()
        .unwrap();
    let text = text(&out);
    assert!(out.status.success(), "{text}");
    assert!(!text.contains(TOKEN), "{text}");
    assert!(text.contains("env:CHAT_TOKEN"), "{text}");
    assert!(
        text.contains("warning: sources[0] (\"github\").deliver[0] (\"chat\"): no signing_secret"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_program_makes_the_delivery_dead_with_the_jq_error_and_sends_nothing() {
    let down = Downstream::start(|_, _| Reply::status(204)).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let sources = source(&destination(
        "strict",
        &format!(
            "url = \"{}\"\nsigning_secret = \"{SIGNING_SECRET}\"\n\
             transform = 'if .n > 1 then error(\"too many: \\(.n)\") elif .n == 1 then .[] else . end'",
            down.url()
        ),
    ));
    let server = ChildServer::spawn_ready(dir.path(), &db, &sources, "", 0).await;
    let failed = post(server.addr, "g1", "push", br#"{"n": 7}"#).await;
    let many = post(server.addr, "g2", "push", br#"{"n": 1, "m": 2}"#).await;
    let text = post(server.addr, "g3", "push", b"not json at all").await;
    let fine = post(server.addr, "g4", "push", br#"{"n": 0}"#).await;

    let (_, error) = settled(&db, failed, "strict", "dead").await;
    let error = error.unwrap();
    assert!(error.contains("too many: 7"), "{error}");
    let (_, error) = settled(&db, many, "strict", "dead").await;
    assert!(error.unwrap().contains("more than one output"));
    // Not JSON: its text is `.`, and `.n` of a string is an error.
    let (_, error) = settled(&db, text, "strict", "dead").await;
    assert!(error.unwrap().contains("cannot index"), "the jq error");
    settled(&db, fine, "strict", "delivered").await;
    assert_eq!(outcomes(&db, failed), [(1, "dead".into(), None)]);
    // Signed: the signature covers the output, as sent.
    let hits = down.wait_for_hits(1).await;
    assert_eq!(hits.len(), 1, "only the event the program took is sent");
    assert_eq!(&hits[0].body[..], br#"{"n":0}"#);
    verify_signature_with(SIGNING_SECRET, &hits[0]).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runaway_programs_end_dead_within_the_bound_while_other_deliveries_and_ingest_go_on() {
    let down = Downstream::start(|_, _| Reply::status(204)).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let url = down.url();
    let sources = source(&format!(
        "{}{}{}{}",
        destination("deep", "command = [\"true\"]\ntransform = 'def f: [f]; f'"),
        destination(
            "loop",
            "command = [\"true\"]\ntransform = 'last(repeat(.))'"
        ),
        destination(
            "grow",
            "command = [\"true\"]\ntransform = '[.i | recurse(.+1)]'"
        ),
        destination(
            "plain",
            &format!("url = \"{url}\"\nsigning_secret = \"{SIGNING_SECRET}\"")
        ),
    ));
    let mut server = ChildServer::spawn_ready(dir.path(), &db, &sources, "", 0).await;
    let started = Instant::now();
    let mut ids = Vec::new();
    for i in 0..3 {
        let body = format!(r#"{{"i": {i}}}"#);
        ids.push(post(server.addr, &format!("g{i}"), "push", body.as_bytes()).await);
    }
    // Ingest keeps answering while the programs run.
    for i in 3..13 {
        let body = format!(r#"{{"i": {i}}}"#);
        let at = Instant::now();
        ids.push(post(server.addr, &format!("g{i}"), "push", body.as_bytes()).await);
        assert!(
            at.elapsed() < Duration::from_secs(1),
            "ingest stalled: {:?}",
            at.elapsed()
        );
    }
    for &id in &ids {
        settled(&db, id, "plain", "delivered").await;
    }
    for &id in &ids[..3] {
        let (_, error) = settled(&db, id, "deep", "dead").await;
        let error = error.unwrap();
        assert!(error.contains("transform process died"), "{error}");
        let (_, error) = settled(&db, id, "loop", "dead").await;
        assert!(error.unwrap().contains("time limit of 1s"));
        let (_, error) = settled(&db, id, "grow", "dead").await;
        let error = error.unwrap();
        assert!(
            error.contains("time limit") || error.contains("died"),
            "{error}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "three runaway programs per event took {:?}",
        started.elapsed()
    );
    assert!(server.running(), "hookbox itself must survive");
    let health = server.admin_get("/readyz").await;
    assert_eq!(health.status(), 200);
    assert_eq!(down.hits().len(), ids.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_gets_the_output_on_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let out = dir.path().join("out");
    let sources = source(&destination(
        "cmd",
        &format!(
            "command = [\"sh\", \"-c\", \"cat > {}\"]\ntransform = '{{id: $event.delivery_id, type: $event.event_type, repo: .repository.full_name}}'",
            out.display()
        ),
    ));
    let server = ChildServer::spawn_ready(dir.path(), &db, &sources, "", 0).await;
    let id = post(server.addr, "guid-cmd", "push", PUSH).await;
    settled(&db, id, "cmd", "delivered").await;
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        r#"{"id":"guid-cmd","type":"push","repo":"acme/widgets"}"#
    );
}

#[tokio::test]
async fn check_refuses_a_program_that_does_not_compile_saying_where() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hookbox.toml");
    let sources = source(&format!(
        "{}{}{}",
        destination("fine", "command = [\"true\"]\ntransform = '.'"),
        destination(
            "chat",
            "url = \"http://127.0.0.1:9/\"\ntransform = '''\n{content: .a,\n  text: (.b | }\n'''"
        ),
        destination(
            "pulled",
            "pull = { token = \"0123456789abcdef0123\" }\ntransform = '.'"
        ),
    ));
    std::fs::write(
        &config,
        format!(
            "[server]\ndatabase = \"{}\"\n{sources}",
            dir.path().join("db").display()
        ),
    )
    .unwrap();
    let out = hookbox()
        .arg("check")
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let text = text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains(
            "sources[0] (\"github\").deliver[1] (\"chat\").transform: line 2, column 15:"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "sources[0] (\"github\").deliver[2] (\"pulled\").transform: not for pull destinations"
        ),
        "{text}"
    );
    assert!(!text.contains("(\"fine\")"), "{text}");
}

/// A backlog through a transform: a lane starting many deliveries runs
/// their transforms ahead in batches, and each delivery still gets its
/// own event's output; one failing among them fails alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_through_a_transform_gets_each_event_its_own_output() {
    let down = Downstream::start(|_, _| Reply::status(204)).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let program = r#"{n: .n, id: $event.delivery_id, type: $event.event_type}
  | if .n == 77 then error("seventy-seven") else . end"#;
    let sources = source(&destination(
        "each",
        &format!("url = \"{}\"\ntransform = '''\n{program}\n'''", down.url()),
    ));
    let server = ChildServer::spawn_ready(dir.path(), &db, &sources, "", 0).await;
    // Paused while the events arrive, so that resuming starts a backlog.
    let paused = server
        .admin_post("/api/destinations/github/each/pause", serde_json::json!({}))
        .await;
    assert!(paused.status().is_success(), "{}", paused.status());
    let mut ids = Vec::new();
    for i in 0..150 {
        let body = format!(r#"{{"n": {i}, "pad": "{}"}}"#, "x".repeat(i * 7));
        ids.push(post(server.addr, &format!("guid-{i}"), "push", body.as_bytes()).await);
    }
    let resumed = server
        .admin_post(
            "/api/destinations/github/each/resume",
            serde_json::json!({}),
        )
        .await;
    assert!(resumed.status().is_success(), "{}", resumed.status());

    let (_, error) = settled(&db, ids[77], "each", "dead").await;
    assert!(error.unwrap().contains("seventy-seven"));
    let hits = down.wait_for_hits(149).await;
    for (i, id) in ids.iter().enumerate().filter(|(i, _)| *i != 77) {
        settled(&db, *id, "each", "delivered").await;
        let sent: Vec<_> = hits
            .iter()
            .filter(|h| h.delivery() == format!("guid-{i}"))
            .collect();
        assert_eq!(sent.len(), 1, "guid-{i} sent once");
        assert_eq!(
            std::str::from_utf8(&sent[0].body).unwrap(),
            format!(r#"{{"n":{i},"id":"guid-{i}","type":"push"}}"#),
        );
    }
    assert_eq!(down.hits().len(), 149);
}

/// Many requests at once through one transform process: each answer
/// reaches its own request, and a loop or a crash among them fails only
/// the request it ran on, while those queued behind it in the same batch
/// are answered by a new process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_requests_get_their_own_answers_and_a_runaway_fails_only_its_own() {
    use hookbox::delivery::transform::eval::Reply as Out;
    use hookbox::delivery::transform::pool::Pool;

    let pool = std::sync::Arc::new(
        Pool::with(
            env!("CARGO_BIN_EXE_hookbox").into(),
            vec![
                "{n: .n, who: $event.who}",
                "last(repeat(.))",
                "def f: [f]; f",
            ],
            1,
            Duration::from_millis(300),
        )
        .unwrap(),
    );
    let started = Instant::now();
    let mut runs = tokio::task::JoinSet::new();
    for i in 0..300u32 {
        let pool = pool.clone();
        let program = match i {
            50 => 1,
            120 => 2,
            _ => 0,
        };
        runs.spawn(async move {
            let event = format!(r#"{{"who": "w{i}"}}"#);
            let body = format!(r#"{{"n": {i}, "pad": "{}"}}"#, "x".repeat(i as usize * 10));
            (
                i,
                pool.run(program, event.as_bytes(), body.as_bytes()).await,
            )
        });
    }
    let mut answered = 0;
    while let Some(run) = runs.join_next().await {
        let (i, reply) = run.unwrap();
        answered += 1;
        match i {
            50 => assert!(
                matches!(&reply, Out::Failed(why) if why.contains("time limit of 300ms")),
                "{reply:?}"
            ),
            120 => assert!(
                matches!(&reply, Out::Failed(why) if why.contains("transform process died")),
                "{reply:?}"
            ),
            _ => assert_eq!(
                reply,
                Out::Json(format!(r#"{{"n":{i},"who":"w{i}"}}"#).into_bytes()),
                "request {i}"
            ),
        }
    }
    assert_eq!(answered, 300);

    // Submitted together, as a lane runs transforms ahead: one batch, a
    // crash in the middle of it, every other answer its own.
    let events: Vec<String> = (0..40).map(|i| format!(r#"{{"who": "b{i}"}}"#)).collect();
    let bodies: Vec<String> = (0..40).map(|i| format!(r#"{{"n": {i}}}"#)).collect();
    let answers = pool.submit((0..40).map(|i| {
        let program = if i == 5 { 2 } else { 0 };
        (program, events[i].as_bytes(), bodies[i].as_bytes())
    }));
    assert_eq!(answers.len(), 40);
    for (i, answer) in answers.into_iter().enumerate() {
        let reply = hookbox::delivery::transform::pool::answered(Some(answer)).await;
        if i == 5 {
            assert!(
                matches!(&reply, Out::Failed(why) if why.contains("transform process died")),
                "{reply:?}"
            );
        } else {
            assert_eq!(
                reply,
                Out::Json(format!(r#"{{"n":{i},"who":"b{i}"}}"#).into_bytes()),
                "batched request {i}"
            );
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
}

/// The transform processes of the process `parent`, as `(pid, state, user
/// CPU in clock ticks)` from `/proc` (state `Z`: exited, not yet reaped).
fn transform_processes(parent: u32) -> Vec<(u32, char, u64)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let (Ok(stat), Ok(cmdline)) = (
            std::fs::read_to_string(entry.path().join("stat")),
            std::fs::read(entry.path().join("cmdline")),
        ) else {
            continue;
        };
        // After the `(comm)`: state, then ppid.
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .collect();
        let is_transform = cmdline
            .split(|&b| b == 0)
            .any(|arg| arg == hookbox::delivery::transform::child::ARG.as_bytes());
        if fields[1] == parent.to_string() && is_transform {
            let state = fields[0].chars().next().unwrap();
            found.push((pid, state, fields[11].parse().unwrap()));
        }
    }
    found
}

/// Whether process `pid` has ended (gone, or a zombie nobody reaps: this
/// machine's PID 1 does not).
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .unwrap()
            .trim_start()
            .starts_with('Z'),
        Err(_) => true,
    }
}

/// hookbox killed with SIGKILL while a program loops: its transform
/// process must not spin on a core for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transform_process_ends_when_hookbox_is_killed_mid_loop() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let sources = source(&destination(
        "loop",
        "command = [\"true\"]\ntransform = 'last(repeat(.))'",
    ));
    let mut server = ChildServer::spawn_ready(dir.path(), &db, &sources, "", 0).await;
    for i in 0..5 {
        post(server.addr, &format!("k{i}"), "push", br#"{"i": 1}"#).await;
    }
    let pid = server.pid();
    // Past starting up (a process killed while it starts dies writing its
    // first answer): 0.2 s of CPU in the loop.
    let looping = eventually("a transform process running the loop", || {
        let found = transform_processes(pid);
        found
            .iter()
            .any(|&(_, state, ticks)| state == 'R' && ticks >= 20)
            .then_some(found)
    })
    .await;
    server.kill9();
    let started = Instant::now();
    for (child, _, _) in looping {
        while !ended(child) {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "transform process {child} still runs {:?} after hookbox was killed",
                started.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
