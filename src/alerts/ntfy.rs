//! ntfy: POST the text as the body to the topic URL, with `Title`,
//! `Priority` (1-5) and `Tags` headers. <https://docs.ntfy.sh/publish/>
//!
//! Header values must be ASCII here; ntfy reads RFC 2047 for the rest, so
//! a title that is not ASCII is sent that way.
//!
//! The text quotes what others wrote (a command's stderr), so it goes as
//! `text/plain` and with none of the headers that make ntfy read it as
//! something else (`Markdown`, `Template`, `Click`, `Actions`, `Attach`):
//! ntfy shows it as written.

use base64::Engine as _;
use reqwest::RequestBuilder;

use super::Message;

pub fn request(post: RequestBuilder, message: &Message) -> RequestBuilder {
    post.header("Title", title(&message.title))
        .header("Priority", message.priority().to_string())
        .header("Tags", tags(message))
        .header(reqwest::header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(message.text.clone())
}

/// `warning` shows ntfy's ⚠️ emoji; the condition is the second tag.
pub fn tags(message: &Message) -> String {
    let icon = if message.condition.is_some() {
        "warning"
    } else {
        "white_check_mark"
    };
    format!("{icon},hookbox,{}", message.kind())
}

/// `hookbox: <title>`, as RFC 2047 base64 when it is not printable ASCII.
pub fn title(title: &str) -> String {
    let text = format!("hookbox: {title}");
    if text.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        text
    } else {
        let encoded = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
        format!("=?UTF-8?B?{encoded}?=")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_titles_go_as_they_are_and_others_encoded() {
        assert_eq!(title("Test"), "hookbox: Test");
        assert_eq!(title("a → b"), "=?UTF-8?B?aG9va2JveDogYSDihpIgYg==?=");
    }
}
