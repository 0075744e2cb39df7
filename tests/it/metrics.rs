//! `GET /metrics`: the text parses as the Prometheus exposition format
//! (a strict parser below: prometheus-client has none), and the counters
//! move as expected after known traffic.

use std::collections::{BTreeMap, HashSet};

use crate::helpers::*;

/// One sample: metric name, labels, value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Parses the text format (version 0.0.4) strictly: every line is a
/// `# HELP`, a `# TYPE` or a sample of the family last typed; label
/// values are quoted and escaped; each family is typed once; histogram
/// buckets are cumulative and end with `+Inf` equal to `_count`.
fn parse(text: &str) -> Vec<Sample> {
    assert!(text.ends_with('\n'), "the text must end with a newline");
    let mut samples = Vec::new();
    let mut typed: HashSet<String> = HashSet::new();
    let mut family: Option<(String, String)> = None;
    for (n, line) in text.lines().enumerate() {
        let at = format!("line {}: {line:?}", n + 1);
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, _help) = rest.split_once(' ').unwrap_or((rest, ""));
            assert!(valid_name(name), "{at}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or_else(|| panic!("{at}"));
            assert!(valid_name(name), "{at}");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "{at}"
            );
            assert!(typed.insert(name.to_owned()), "{at}: typed twice");
            family = Some((name.to_owned(), kind.to_owned()));
            continue;
        }
        assert!(!line.starts_with('#') && !line.is_empty(), "{at}");
        let sample = parse_sample(line).unwrap_or_else(|why| panic!("{at}: {why}"));
        let (fam, kind) = family
            .clone()
            .unwrap_or_else(|| panic!("{at}: no TYPE before"));
        let belongs = match kind.as_str() {
            "histogram" => [
                &fam,
                &format!("{fam}_bucket"),
                &format!("{fam}_sum"),
                &format!("{fam}_count"),
            ]
            .iter()
            .any(|n| **n == sample.name),
            _ => sample.name == fam,
        };
        assert!(belongs, "{at}: not part of family {fam} ({kind})");
        samples.push(sample);
    }
    check_histograms(&samples);
    samples
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let (name, rest) = match line.find(['{', ' ']) {
        Some(i) => line.split_at(i),
        None => return Err("no value".into()),
    };
    if !valid_name(name) {
        return Err(format!("bad metric name {name:?}"));
    }
    let mut labels = BTreeMap::new();
    let mut rest = rest;
    if let Some(mut inner) = rest.strip_prefix('{') {
        loop {
            if let Some(after) = inner.strip_prefix('}') {
                rest = after;
                break;
            }
            let eq = inner.find('=').ok_or("label without '='")?;
            let key = &inner[..eq];
            if !valid_name(key) || key.contains(':') {
                return Err(format!("bad label name {key:?}"));
            }
            let mut chars = inner[eq + 1..].char_indices();
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err("label value not quoted".into());
            }
            let mut value = String::new();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => match chars.next().map(|(_, c)| c) {
                        Some('\\') => value.push('\\'),
                        Some('"') => value.push('"'),
                        Some('n') => value.push('\n'),
                        other => return Err(format!("bad escape {other:?}")),
                    },
                    '"' => {
                        end = Some(eq + 1 + i + 1);
                        break;
                    }
                    '\n' => return Err("raw newline in a label value".into()),
                    c => value.push(c),
                }
            }
            let end = end.ok_or("unterminated label value")?;
            if labels.insert(key.to_owned(), value).is_some() {
                return Err(format!("label {key} twice"));
            }
            inner = &inner[end..];
            inner = inner.strip_prefix(',').unwrap_or(inner);
        }
    }
    let rest = rest.strip_prefix(' ').ok_or("no space before the value")?;
    let mut parts = rest.split(' ');
    let value = parts.next().ok_or("no value")?;
    let value: f64 = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse().map_err(|_| format!("bad value {v:?}"))?,
    };
    if let Some(ts) = parts.next() {
        ts.parse::<i64>()
            .map_err(|_| format!("bad timestamp {ts:?}"))?;
    }
    if parts.next().is_some() {
        return Err("trailing text".into());
    }
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// A histogram's base name and its labels but `le`.
type SeriesKey = (String, Vec<(String, String)>);

/// Buckets never decrease and `+Inf` equals `_count`, per series.
fn check_histograms(samples: &[Sample]) {
    let mut buckets: BTreeMap<SeriesKey, Vec<(f64, f64)>> = BTreeMap::new();
    for s in samples {
        if let Some(base) = s.name.strip_suffix("_bucket") {
            let mut labels = s.labels.clone();
            let le = labels.remove("le").expect("a bucket has le");
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            let key = (base.to_owned(), labels.into_iter().collect());
            buckets.entry(key).or_default().push((le, s.value));
        }
    }
    for ((base, labels), series) in &buckets {
        assert!(
            series
                .windows(2)
                .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
            "{base}{labels:?}"
        );
        let (last_le, last) = *series.last().unwrap();
        assert!(last_le.is_infinite(), "{base} has no +Inf bucket");
        let count = samples
            .iter()
            .find(|s| {
                s.name == format!("{base}_count")
                    && s.labels.clone().into_iter().collect::<Vec<_>>() == *labels
            })
            .unwrap_or_else(|| panic!("{base}{labels:?} has no _count"));
        assert_eq!(count.value, last, "{base}{labels:?}");
    }
}

/// The value of the sample `name` with exactly `labels`.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let want: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    samples
        .iter()
        .find(|s| s.name == name && s.labels == want)
        .map(|s| s.value)
}

async fn scrape(app: &TestApp) -> Vec<Sample> {
    let r = app.admin_get("/metrics").await;
    assert_eq!(r.status(), 200);
    let content_type = r.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    parse(&r.text().await.unwrap())
}

#[tokio::test]
async fn metrics_parse_and_count_accepted_duplicate_and_rejected_requests() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    let before = scrape(&app).await;
    let received = |s: &[Sample], outcome: &str| {
        value(
            s,
            "hookbox_received_total",
            &[("source", "github"), ("outcome", outcome)],
        )
    };
    assert_eq!(received(&before, "accepted"), Some(0.0));

    for i in 0..3 {
        assert_eq!(
            app.post_github(&format!("m-{i}"), b"{}").await.status(),
            202
        );
    }
    assert_eq!(app.post_github("m-0", b"{}").await.status(), 200);
    for i in 0..2 {
        let r = app
            .client
            .post(app.url("/hooks/github"))
            .header("x-github-event", "push")
            .header("x-github-delivery", format!("forged-{i}"))
            .header(
                "x-hub-signature-256",
                github_signature("not-the-secret", b"{}"),
            )
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
    }
    let r = app
        .client
        .post(app.url("/hooks/nope"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    let after = scrape(&app).await;
    assert_eq!(received(&after, "accepted"), Some(3.0));
    assert_eq!(received(&after, "duplicate"), Some(1.0));
    let rejected = value(
        &after,
        "hookbox_received_total",
        &[
            ("source", "github"),
            ("outcome", "rejected"),
            ("reason", "invalid_signature"),
        ],
    );
    assert_eq!(rejected, Some(2.0));
    let unknown = value(
        &after,
        "hookbox_received_total",
        &[
            ("source", "(unknown)"),
            ("outcome", "rejected"),
            ("reason", "unknown_source"),
        ],
    );
    assert_eq!(unknown, Some(1.0));
    let timed = value(
        &after,
        "hookbox_request_duration_seconds_count",
        &[("source", "github")],
    );
    assert_eq!(timed, Some(6.0));
    let batches = value(&after, "hookbox_writer_batch_size_count", &[]).unwrap();
    let batched = value(&after, "hookbox_writer_batch_size_sum", &[]).unwrap();
    assert!(
        batches >= 1.0 && batched >= 3.0,
        "{batches} groups, {batched} commands"
    );
    assert!(value(&after, "hookbox_writer_commit_duration_seconds_count", &[]).unwrap() >= 1.0);
    // durability = "full": every answered group waited for an fsync.
    assert!(value(&after, "hookbox_wal_sync_duration_seconds_count", &[]).unwrap() >= 1.0);
    assert!(value(&after, "hookbox_database_size_bytes", &[]).unwrap() > 0.0);
    // A source without a destination stores: nothing pending or dead.
    assert_eq!(
        value(&after, "hookbox_pending_events", &[("source", "github")]),
        Some(0.0)
    );
    assert_eq!(
        value(&after, "hookbox_dead_events", &[("source", "github")]),
        Some(0.0)
    );

    let r = app
        .client
        .get(app.admin_url("/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "metrics are behind the token");
    app.shutdown().await;
}

#[tokio::test]
async fn dispatch_attempts_dead_letters_and_catch_up_runs_are_exported() {
    let downstream = Downstream::start(|delivery, _| {
        if delivery == "bad" {
            Reply::status(410)
        } else {
            Reply::status(200)
        }
    })
    .await;
    let sources = deliver_source("github", &url_destination(&downstream.url()), "5s", 3);
    let app = TestApp::spawn(&sources).await;
    let good = post_event(app.addr, "github", "good", "application/json", b"{}").await;
    let bad = post_event(app.addr, "github", "bad", "application/json", b"{}").await;
    wait_for_state(&app.db_path, good, "delivered").await;
    wait_for_state(&app.db_path, bad, "dead").await;
    app.db()
        .execute_batch(
            "INSERT INTO catchup_runs (id, source, job, started_at, complete) VALUES (7, 'github', 'github_redelivery', 5000, 1);
             INSERT INTO catchup_state (source, job, last_success_at) VALUES ('github', 'github_redelivery', 5000);
             INSERT INTO redelivery_requests (run_id, source, guid, attempt_id, requested_at, outcome)
             VALUES (7, 'github', 'g-1', 1, 5000, 'asked'), (7, 'github', 'g-2', 2, 5000, 'asked');",
        )
        .unwrap();

    let s = scrape(&app).await;
    let attempts = |outcome| {
        value(
            &s,
            "hookbox_dispatch_attempts_total",
            &[
                ("source", "github"),
                ("destination", "default"),
                ("outcome", outcome),
            ],
        )
    };
    assert_eq!(attempts("delivered"), Some(1.0));
    assert_eq!(attempts("dead"), Some(1.0));
    assert_eq!(attempts("retry"), Some(0.0));
    assert_eq!(
        value(
            &s,
            "hookbox_dispatch_duration_seconds_count",
            &[("source", "github"), ("destination", "default")]
        ),
        Some(2.0)
    );
    assert_eq!(
        value(&s, "hookbox_dead_events", &[("source", "github")]),
        Some(1.0)
    );
    assert_eq!(
        value(&s, "hookbox_pending_events", &[("source", "github")]),
        Some(0.0)
    );
    assert_eq!(
        value(
            &s,
            "hookbox_oldest_pending_age_seconds",
            &[("source", "github")]
        ),
        Some(0.0)
    );
    let job = [("source", "github"), ("job", "github_redelivery")];
    assert_eq!(value(&s, "hookbox_catchup_runs_total", &job), Some(1.0));
    assert_eq!(
        value(&s, "hookbox_catchup_last_success_timestamp_seconds", &job),
        Some(5.0)
    );
    assert_eq!(
        value(
            &s,
            "hookbox_redelivery_requests_total",
            &[("source", "github"), ("outcome", "asked")]
        ),
        Some(2.0)
    );
    app.shutdown().await;
}

#[test]
fn the_parser_refuses_what_prometheus_would() {
    for bad in [
        "x 1",                                   // no TYPE
        "# TYPE x gauge\nx{a=\"1\" 1\n",         // unterminated labels
        "# TYPE x gauge\nx{a=1} 1\n",            // unquoted
        "# TYPE x gauge\nx one\n",               // bad value
        "# TYPE x gauge\ny 1\n",                 // outside its family
        "# TYPE x gauge\n# TYPE x gauge\nx 1\n", // typed twice
    ] {
        let text = if bad.ends_with('\n') {
            bad.to_owned()
        } else {
            format!("{bad}\n")
        };
        assert!(
            std::panic::catch_unwind(|| parse(&text)).is_err(),
            "accepted {bad:?}"
        );
    }
    let ok = parse("# HELP x A \"gauge\".\n# TYPE x gauge\nx{a=\"q\\\"\\\\\\n\"} 1.5\n");
    assert_eq!(ok[0].labels["a"], "q\"\\\n");
}
