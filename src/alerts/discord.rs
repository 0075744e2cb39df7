//! Discord channel webhooks: `{"content": ...}` (at most 2000 characters).
//! <https://discord.com/developers/docs/resources/webhook#execute-webhook>
//!
//! The title and text quote what others wrote (a command's stderr, a
//! payload value in it), so nothing in them may act: mentions are turned
//! off (`allowed_mentions`: an excerpt quoting `@everyone` must not ping a
//! whole server), and every character Discord's markdown reads is
//! backslash-escaped, so a masked link `[text](url)` shows as written
//! instead of hiding where it goes, and no heading, spoiler or code block
//! changes what the message says.

use reqwest::RequestBuilder;
use serde_json::json;

use super::Message;

/// Discord refuses longer `content`.
const MAX_CHARS: usize = 2000;

/// What Discord's markdown reads: emphasis, spoilers, code, quotes,
/// headings and lists, masked links, and the `<@id>`, `<#id>` and `<t:..>`
/// forms. Discord takes a backslash before any of them as the character
/// itself.
const MARKDOWN: &[char] = &[
    '\\', '*', '_', '~', '`', '|', '>', '<', '#', '-', '[', ']', '(', ')', '@',
];

pub fn request(post: RequestBuilder, message: &Message) -> RequestBuilder {
    post.json(&body(message))
}

pub fn body(message: &Message) -> serde_json::Value {
    let text = format!(
        "**hookbox: {}**\n{}",
        escape(&message.title),
        escape(&message.text)
    );
    let content = crate::support::excerpt::chars(&text, MAX_CHARS);
    json!({ "content": content, "allowed_mentions": { "parse": [] } })
}

fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if MARKDOWN.contains(&c) {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
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

    #[test]
    fn masked_links_and_markdown_show_as_written() {
        assert_eq!(
            escape(r"[see](https://x.example) **b** ||s|| \ <@1>"),
            r"\[see\]\(https://x.example\) \*\*b\*\* \|\|s\|\| \\ \<\@1\>"
        );
    }
}
