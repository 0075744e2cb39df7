//! A destination's filter, through the running server: matching events
//! are delivered, the others kept as `stored` and never sent.

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_events_the_filter_matches_are_delivered_the_rest_are_stored() {
    let down = Downstream::start(|_, _| Reply::status(204)).await;
    let destination = format!(
        "{}\nevents = [\"push\", \"pull_*\"]\nwhen = {{ \"/ref\" = [\"refs/heads/main\", \"refs/tags/v*\"] }}",
        url_destination(&down.url())
    );
    let app = TestApp::spawn(&deliver_source("github", &destination, "10s", 3)).await;
    let post = |delivery: &'static str, event: &'static str, body: &'static str| {
        let client = app.client.clone();
        let url = app.url("/hooks/github");
        async move {
            let r = github_event_request(&client, &url, event, delivery, body.as_bytes())
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 202, "{delivery}");
            json(r).await["id"].as_i64().unwrap()
        }
    };
    let main = post("main", "push", r#"{"ref":"refs/heads/main"}"#).await;
    let tag = post("tag", "pull_request", r#"{"ref":"refs/tags/v1.2"}"#).await;
    let dev = post("dev", "push", r#"{"ref":"refs/heads/dev"}"#).await;
    let issue = post("issue", "issues", r#"{"ref":"refs/heads/main"}"#).await;
    let no_ref = post("no-ref", "push", r#"{"zen":"x"}"#).await;
    let not_json = post("not-json", "push", "ref=refs/heads/main").await;

    wait_for_state(&app.db_path, main, "delivered").await;
    wait_for_state(&app.db_path, tag, "delivered").await;
    for id in [dev, issue, no_ref, not_json] {
        assert_eq!(event_row(&app.db_path, id).state, "stored");
    }
    let mut sent: Vec<String> = down
        .hits()
        .iter()
        .map(|h| h.delivery().to_owned())
        .collect();
    sent.sort();
    assert_eq!(sent, ["main", "tag"]);
    app.shutdown().await;
}
