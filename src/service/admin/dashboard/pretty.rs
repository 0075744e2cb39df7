//! A JSON body, re-indented for the event page.
//!
//! Only the whitespace between tokens changes: keys keep their order (and
//! duplicates), numbers and strings keep their exact text (no float
//! rounding, escapes as sent), which a parse-and-print through
//! `serde_json::Value` would not promise. Anything that is not valid JSON
//! is left alone (`None`), and the page shows it as it came.

/// Two spaces per level, one member or element per line, `"key": value`;
/// empty objects and arrays stay `{}` and `[]`. `None` unless `text` is
/// one valid JSON value.
pub(super) fn pretty_json(text: &str) -> Option<String> {
    serde_json::from_str::<serde::de::IgnoredAny>(text).ok()?;
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    let mut depth = 0usize;
    let mut chars = text.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        for _ in 0..depth {
            out.push_str("  ");
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                out.push('"');
                let mut escaped = false;
                for c in chars.by_ref() {
                    out.push(c);
                    match c {
                        _ if escaped => escaped = false,
                        '\\' => escaped = true,
                        '"' => break,
                        _ => {}
                    }
                }
            }
            '{' | '[' => {
                out.push(c);
                while chars.next_if(|c| c.is_ascii_whitespace()).is_some() {}
                let empty = |n: &char| (c == '{' && *n == '}') || (c == '[' && *n == ']');
                if let Some(close) = chars.next_if(empty) {
                    out.push(close);
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(',');
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_ascii_whitespace() => {}
            c => out.push(c),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_and_arrays_are_indented_and_tokens_kept_exactly() {
        let body = r#"{"b":1.50,"a":[1, {"x":"y, \"z\": {[]}"},[],{}],"n":null,"big":123456789012345678901234567890,"b":true}"#;
        let expected = r#"{
  "b": 1.50,
  "a": [
    1,
    {
      "x": "y, \"z\": {[]}"
    },
    [],
    {}
  ],
  "n": null,
  "big": 123456789012345678901234567890,
  "b": true
}"#;
        assert_eq!(pretty_json(body).as_deref(), Some(expected));
        // Already pretty (or oddly spaced) comes out the same.
        assert_eq!(pretty_json(expected).as_deref(), Some(expected));
        assert_eq!(
            pretty_json(" [ ] ").as_deref(),
            Some("[]"),
            "outer whitespace goes"
        );
        assert_eq!(
            pretty_json("\"\\u00e9 \\\\\"").as_deref(),
            Some("\"\\u00e9 \\\\\"")
        );
    }

    #[test]
    fn what_is_not_json_is_left_alone() {
        for text in ["", "a=1&b=2", "{\"a\":1", "{\"a\":1} trailing", "<xml/>"] {
            assert_eq!(pretty_json(text), None, "{text}");
        }
    }
}
