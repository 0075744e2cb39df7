//! Where a broker message goes, with placeholders: a subject, stream,
//! routing key or topic such as `hooks.{source}.{event_type}`.
//!
//! The placeholders are `{source}`, `{destination}`, `{event_type}`,
//! `{delivery_id}` and `{/json/pointer}` (the value at that pointer of a
//! JSON body: a string as is, anything else as its JSON text). Anything
//! else in braces is literal text. Each value is made safe for the
//! broker's naming rules before it is put in ([`NameRules`]): every
//! character the broker would read as structure or a wildcard (NATS' `.`,
//! `*`, `>`; MQTT's `/`, `+`, `#`) or that is not plain ASCII becomes `_`,
//! an empty or missing value is `_`, and a value is cut to
//! [`MAX_VALUE`] bytes, so an event can never choose a name outside the
//! shape the operator wrote (a provider's payload must not publish to
//! `$JS.API.>` or to another team's topic). The literal text is checked
//! once, at load.

use std::fmt;

/// The longest a placeholder's value may be, after it was made safe.
pub const MAX_VALUE: usize = 128;

/// One broker's naming rules.
pub struct NameRules {
    /// The broker's word for the name: "subject", "topic", ...
    pub what: &'static str,
    /// The characters a placeholder's value keeps; any other becomes `_`.
    pub keep: fn(char) -> bool,
    /// Checks a whole name (literal text and values): `Err(why)`.
    pub check: fn(&str) -> Result<(), String>,
}

/// What of an event the placeholders read, borrowed from the attempt.
pub use crate::config::placeholders::Event as Names;
use crate::config::placeholders::{Part, Values, parse};

/// A parsed name with its broker's rules.
#[derive(Clone)]
pub struct NameTemplate {
    text: String,
    parts: Vec<Part>,
    rules: &'static NameRules,
}

impl PartialEq for NameTemplate {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text && self.rules.what == other.rules.what
    }
}

impl Eq for NameTemplate {}

impl fmt::Debug for NameTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.text, f)
    }
}

impl NameTemplate {
    /// Parses `text`; `Err` says why it cannot be a name under `rules`
    /// (a bad pointer, literal text the broker refuses).
    pub fn parse(text: &str, rules: &'static NameRules) -> Result<NameTemplate, String> {
        let parts = parse(text)?;
        let template = NameTemplate {
            text: text.to_owned(),
            parts,
            rules,
        };
        // Every value renders to at least `_`: what is left to refuse is
        // the operator's literal text.
        let sample = template.render_with(|_| "x");
        (rules.check)(&sample).map_err(|why| format!("is not a valid {}: {why}", rules.what))?;
        Ok(template)
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The name for one event; `Err(why)` when even with safe values the
    /// broker would refuse it (a name grown past the broker's length).
    pub fn render(&self, names: &Names) -> Result<String, String> {
        let values = Values::new(names, &self.parts);
        let name = self.render_with(|part| values.get(part));
        (self.rules.check)(&name)
            .map_err(|why| format!("the {} {name:?} is not valid: {why}", self.rules.what))?;
        Ok(name)
    }

    /// The name with each placeholder's value from `value`, made safe.
    fn render_with<'p, V: AsRef<str>>(&'p self, value: impl Fn(&'p Part) -> V) -> String {
        let mut name = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(text) => name.push_str(text),
                other => name.push_str(&self.safe(value(other).as_ref())),
            }
        }
        name
    }

    fn safe(&self, value: &str) -> String {
        let mut safe: String = value
            .chars()
            .map(|c| if (self.rules.keep)(c) { c } else { '_' })
            .take(MAX_VALUE)
            .collect();
        if safe.is_empty() {
            safe.push('_');
        }
        safe
    }
}

/// ASCII letters, digits, `-` and `_`: safe in every broker's names.
pub fn plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

#[cfg(test)]
mod tests {
    use super::*;

    static DOTTED: NameRules = NameRules {
        what: "subject",
        keep: plain,
        check: |name| {
            if name.split('.').any(str::is_empty) {
                return Err("empty token".into());
            }
            Ok(())
        },
    };

    fn names(body: &[u8]) -> Names<'_> {
        Names {
            source: "github",
            destination: "bus",
            delivery_id: "d-1",
            event_type: Some("pull_request.opened"),
            body,
        }
    }

    #[test]
    fn placeholders_are_filled_and_made_safe() {
        let t = NameTemplate::parse(
            "hooks.{source}.{destination}.{event_type}.{/repo/name}.{/n}.{/missing}.{delivery_id}.{other}",
            &DOTTED,
        )
        .unwrap();
        let body = br#"{"repo": {"name": "acme/shop.*>"}, "n": 7}"#;
        assert_eq!(
            t.render(&names(body)).unwrap(),
            "hooks.github.bus.pull_request_opened.acme_shop___.7._.d-1.{other}"
        );
        // Not JSON: every pointer is missing.
        assert_eq!(
            NameTemplate::parse("a.{/x}", &DOTTED)
                .unwrap()
                .render(&names(b"not json"))
                .unwrap(),
            "a._"
        );
    }

    #[test]
    fn a_value_is_cut_and_never_empty_or_unicode() {
        let t = NameTemplate::parse("{/v}", &DOTTED).unwrap();
        let long = format!(r#"{{"v": "{}"}}"#, "é".repeat(500));
        let name = t.render(&names(long.as_bytes())).unwrap();
        assert_eq!(name, "_".repeat(MAX_VALUE));
        assert_eq!(t.render(&names(br#"{"v": ""}"#)).unwrap(), "_");
    }

    #[test]
    fn literal_text_the_broker_refuses_and_bad_pointers_are_errors() {
        let err = NameTemplate::parse("a..{source}", &DOTTED).unwrap_err();
        assert!(err.contains("is not a valid subject: empty token"), "{err}");
        let err = NameTemplate::parse("a.{/a~2}", &DOTTED).unwrap_err();
        assert!(err.contains("{/a~2}"), "{err}");
    }
}
