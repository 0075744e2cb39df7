//! Twilio's `I-Twilio-Idempotency-Token` and Linear's `Linear-Delivery`
//! are not covered by their signatures, so they cannot be what makes an
//! event new: a captured signed request re-posted with only that header
//! changed is a duplicate of the one stored, through the real router. So
//! is each provider's own retry: Twilio's is the same request, Linear's
//! the same payload with a new `webhookTimestamp` and signature.

use serde_json::Value;

use crate::helpers::*;

/// A POST of `body` to `/hooks/{source}` (with `query`) with `headers`.
async fn post(
    app: &TestApp,
    source: &str,
    query: Option<&str>,
    headers: &[(&str, &str)],
    body: &str,
) -> reqwest::Response {
    let mut url = app.url(&format!("/hooks/{source}"));
    if let Some(query) = query {
        url = format!("{url}?{query}");
    }
    let mut request = app.client.post(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(body.to_owned()).send().await.unwrap()
}

/// The answer's status and JSON.
async fn answer(r: reqwest::Response) -> (u16, Value) {
    (r.status().as_u16(), r.json().await.unwrap())
}

fn events(app: &TestApp) -> i64 {
    app.count("SELECT count(*) FROM events")
}

#[tokio::test]
async fn a_twilio_request_replayed_with_another_idempotency_token_is_a_duplicate() {
    let file = vector_file("twilio");
    let case = &file["cases"][0];
    assert_eq!(case["name"], "valid form callback");
    let secrets = file["secrets"].to_string();
    let app = TestApp::spawn(&format!(
        "[[sources]]\nname = \"sms\"\nkind = \"twilio\"\nsecrets = {secrets}\npublic_url = {}\n",
        file["public_url"]
    ))
    .await;
    let signature = case["headers"]["x-twilio-signature"].as_str().unwrap();
    let token = case["headers"]["i-twilio-idempotency-token"]
        .as_str()
        .unwrap();
    let body = case["body"].as_str().unwrap();
    let form = [("content-type", "application/x-www-form-urlencoded")];
    let with = |token: Option<&'static str>| {
        let mut headers = vec![form[0], ("x-twilio-signature", signature)];
        if let Some(token) = token {
            headers.push(("i-twilio-idempotency-token", token));
        }
        headers
    };
    let mut first = with(None);
    first.push(("i-twilio-idempotency-token", token));
    let (status, stored) = answer(post(&app, "sms", None, &first, body).await).await;
    assert_eq!(status, 202, "{stored}");
    let id = stored["id"].as_i64().unwrap();

    // The replays: a token of the attacker's, none at all, and the
    // parameters in another order (the signature covers them sorted).
    let reordered: String = {
        let mut pairs: Vec<&str> = body.split('&').collect();
        pairs.reverse();
        pairs.join("&")
    };
    for (what, headers, body) in [
        ("another token", with(Some("RQ-forged-1")), body),
        ("no token", with(None), body),
        (
            "reordered parameters",
            with(Some("RQ-forged-2")),
            &reordered[..],
        ),
    ] {
        let (status, again) = answer(post(&app, "sms", None, &headers, body).await).await;
        assert_eq!(status, 200, "{what}: {again}");
        assert_eq!(again["status"], "duplicate", "{what}");
        assert_eq!(again["id"], id, "{what}");
    }
    // Twilio's own retry: the same request again.
    let (status, retry) = answer(post(&app, "sms", None, &first, body).await).await;
    assert_eq!((status, &retry["status"]), (200, &Value::from("duplicate")));
    assert_eq!(events(&app), 1);

    // The token Twilio sent is kept with the event.
    let headers: String = app
        .db()
        .query_row("SELECT headers FROM events WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(headers.contains(token), "{headers}");
    app.shutdown().await;
}

const LINEAR_SECRET: &str = "lin_wh_unsigned_ids_test_secret";

/// A Linear delivery of `payload` (a JSON object without its timestamp)
/// sent at `sent_ms`, signed, with `delivery` as `Linear-Delivery`.
async fn linear(app: &TestApp, delivery: &str, payload: &Value, sent_ms: i64) -> (u16, Value) {
    let mut body = payload.clone();
    body["webhookTimestamp"] = sent_ms.into();
    let body = body.to_string();
    let signature = hex::encode(hmac_sha256(LINEAR_SECRET.as_bytes(), body.as_bytes()));
    let headers = [
        ("content-type", "application/json"),
        ("linear-delivery", delivery),
        ("linear-event", "Issue"),
        ("linear-signature", signature.as_str()),
    ];
    answer(post(app, "linear", None, &headers, &body).await).await
}

#[tokio::test]
async fn a_linear_request_replayed_with_another_delivery_header_is_a_duplicate() {
    let app = TestApp::spawn(&format!(
        "[[sources]]\nname = \"linear\"\nkind = \"linear\"\nsecrets = [\"{LINEAR_SECRET}\"]\n"
    ))
    .await;
    let issue = serde_json::json!({
        "action": "create",
        "type": "Issue",
        "createdAt": "2026-12-02T08:00:00.000Z",
        "data": { "id": "2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9", "title": "Replays" },
        "url": "https://linear.app/acme/issue/ENG-7",
        "webhookId": "000d5b74-0000-4000-8000-000000000002",
    });
    let sent = hookbox::support::clock::now_ms();
    let (status, stored) = linear(&app, "d-1", &issue, sent).await;
    assert_eq!(status, 202, "{stored}");
    let id = stored["id"].as_i64().unwrap();

    // The same signed bytes, another Linear-Delivery: a duplicate.
    let (status, replay) = linear(&app, "d-forged", &issue, sent).await;
    assert_eq!(status, 200, "{replay}");
    assert_eq!(replay["status"], "duplicate");
    assert_eq!(replay["id"], id);

    // Linear's retry: the same payload sent again a little later, so
    // with a new timestamp and signature, and (as reported) the same
    // Linear-Delivery.
    let (status, retry) = linear(&app, "d-1", &issue, sent + 1500).await;
    assert_eq!(status, 200, "{retry}");
    assert_eq!(retry["id"], id);
    assert_eq!(events(&app), 1);

    // Another change to the issue is another event.
    let mut update = issue.clone();
    update["action"] = "update".into();
    let (status, other) = linear(&app, "d-2", &update, sent).await;
    assert_eq!(status, 202, "{other}");
    assert_eq!(events(&app), 2);

    let headers: String = app
        .db()
        .query_row("SELECT headers FROM events WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(
        headers.contains("d-1"),
        "Linear-Delivery is kept: {headers}"
    );
    app.shutdown().await;
}
