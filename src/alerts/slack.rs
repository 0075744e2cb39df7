//! Slack incoming webhooks: `{"text": ...}`, with Slack's `mrkdwn` (a
//! bold `*title*` line). <https://api.slack.com/messaging/webhooks>
//!
//! The title and text are escaped as Slack asks
//! (<https://api.slack.com/reference/surfaces/formatting#escaping>): they
//! quote what others wrote (a command's stderr, a payload value in it),
//! and in `<...>` Slack reads mentions (`<!channel>` pings everyone) and
//! links whose shown text hides where they go (`<https://x|y>`).

use reqwest::RequestBuilder;
use serde_json::json;

use super::Message;

pub fn request(post: RequestBuilder, message: &Message) -> RequestBuilder {
    post.json(&body(message))
}

pub fn body(message: &Message) -> serde_json::Value {
    let (title, text) = (escape(&message.title), escape(&message.text));
    json!({ "text": format!("*hookbox: {title}*\n{text}") })
}

/// `&`, `<` and `>` as entities: the three characters Slack reads as
/// control in any message text.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
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

    #[test]
    fn mentions_and_links_are_shown_not_followed() {
        assert_eq!(
            escape("<!channel> & <https://x.example|y> &amp;"),
            "&lt;!channel&gt; &amp; &lt;https://x.example|y&gt; &amp;amp;"
        );
    }
}
