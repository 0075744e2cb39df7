//! Protecting the destination: a rate limit per destination, measured at a
//! local downstream.

use std::time::Duration;

use crate::deliver::{Downstream, Reply, deliver_source, url_destination};
use crate::helpers::*;

/// The most requests that arrived within any `window`, from sorted times.
fn most_within(times: &[std::time::Instant], window: Duration) -> usize {
    let mut most = 0;
    let mut first = 0;
    for (last, t) in times.iter().enumerate() {
        while t.duration_since(times[first]) >= window {
            first += 1;
        }
        most = most.max(last - first + 1);
    }
    most
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_spaces_attempts_whatever_the_backlog_and_the_concurrency() {
    let down = Downstream::start(|_, _| Reply::status(204)).await;
    let destination = format!(
        "{}\nrate = \"20/s\"\nconcurrency = 8",
        url_destination(&down.url())
    );
    let app = TestApp::spawn(&deliver_source("github", &destination, "5s", 3)).await;
    // Forty at once, each of its own key: nothing but the rate holds them.
    for i in 0..40 {
        let body = format!(r#"{{"repository":{{"full_name":"acme/r{i}"}}}}"#);
        assert_eq!(
            app.post_github(&format!("r-{i}"), body.as_bytes())
                .await
                .status(),
            202
        );
    }
    let hits = down.wait_for_hits(40).await;
    let mut times: Vec<_> = hits.iter().map(|h| h.at).collect();
    times.sort();
    let spread = times[39].duration_since(times[0]);
    // 39 gaps of 50 ms; timers and the network may shift a start a little.
    assert!(
        spread >= Duration::from_millis(1_800),
        "40 attempts within {spread:?}"
    );
    let busiest = most_within(&times, Duration::from_secs(1));
    assert!(
        busiest <= 21,
        "{busiest} attempts within one second at 20/s"
    );
}
