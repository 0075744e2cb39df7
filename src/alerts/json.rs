//! hookbox's own JSON alert, signed the Standard Webhooks way (the same
//! signer as url destinations, `crate::signature::standard`), so any Standard
//! Webhooks library verifies it with the alert's `signing_secret`.
//!
//! Body: `{"type": "hookbox.alert.<condition>", "timestamp": RFC 3339,
//! "data": {"condition", "title", "text", "count", "details"}}` (the
//! shape the Standard Webhooks spec recommends). `webhook-id` is new per
//! message and the same on its retries; `webhook-timestamp` is the
//! attempt's.

use reqwest::RequestBuilder;
use serde_json::json;

use super::Message;
use crate::signature::standard;
use crate::support::clock;

pub fn request(
    post: RequestBuilder,
    message: &Message,
    key: &[u8],
    msg_id: &str,
) -> anyhow::Result<RequestBuilder> {
    let body = serde_json::to_vec(&body(message))?;
    let timestamp = clock::now_secs();
    let signature = standard::signature(key, msg_id, timestamp, &body);
    Ok(post
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header("webhook-id", msg_id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(body))
}

pub fn body(message: &Message) -> serde_json::Value {
    json!({
        "type": format!("hookbox.alert.{}", message.kind()),
        "timestamp": rfc3339(message.at),
        "data": {
            "condition": message.kind(),
            "title": message.title,
            "text": message.text,
            "count": message.count,
            "details": message.details,
        },
    })
}

/// A fresh `webhook-id`: `msg_` and 32 random hex digits.
pub fn message_id() -> String {
    format!("msg_{:032x}", fastrand::u128(..))
}

fn rfc3339(ms: i64) -> String {
    let at =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(at).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_follows_the_recommended_shape() {
        let b = body(&Message::test());
        assert_eq!(b["type"], "hookbox.alert.test");
        assert!(b["timestamp"].as_str().unwrap().ends_with('Z'));
        assert_eq!(b["data"]["count"], 1);
        let id = message_id();
        assert!(id.starts_with("msg_") && id.len() == 36 && !id.contains('.'));
    }
}
