//! Slack incoming webhooks: `{"text": ...}`, with Slack's `mrkdwn` (a
//! bold `*title*` line). <https://api.slack.com/messaging/webhooks>

use reqwest::RequestBuilder;
use serde_json::json;

use super::Message;

pub fn request(post: RequestBuilder, message: &Message) -> RequestBuilder {
    post.json(&body(message))
}

pub fn body(message: &Message) -> serde_json::Value {
    json!({ "text": format!("*hookbox: {}*\n{}", message.title, message.text) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_is_one_text_field() {
        let b = body(&Message::test());
        let text = b["text"].as_str().unwrap();
        assert!(
            text.starts_with("*hookbox: Test alert from hookbox*\n"),
            "{text}"
        );
        assert_eq!(b.as_object().unwrap().len(), 1);
    }
}
