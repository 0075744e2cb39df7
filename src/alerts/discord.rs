//! Discord channel webhooks: `{"content": ...}` (at most 2000 characters),
//! with mentions turned off: an error excerpt quoting `@everyone` must not
//! ping a whole server. <https://discord.com/developers/docs/resources/webhook#execute-webhook>

use reqwest::RequestBuilder;
use serde_json::json;

use super::Message;

/// Discord refuses longer `content`.
const MAX_CHARS: usize = 2000;

pub fn request(post: RequestBuilder, message: &Message) -> RequestBuilder {
    post.json(&body(message))
}

pub fn body(message: &Message) -> serde_json::Value {
    let text = format!("**hookbox: {}**\n{}", message.title, message.text);
    let content = crate::excerpt::excerpt(&text, MAX_CHARS);
    json!({ "content": content, "allowed_mentions": { "parse": [] } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_cut_to_discords_limit() {
        let mut m = Message::test();
        m.text = "x".repeat(5000);
        let b = body(&m);
        assert_eq!(b["content"].as_str().unwrap().chars().count(), MAX_CHARS);
        assert_eq!(b["allowed_mentions"]["parse"], json!([]));
    }
}
