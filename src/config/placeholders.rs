//! Placeholders in text the operator writes, filled per event: a command's
//! argv ([`super::argv`]) and a broker's subject, stream, routing key or
//! topic (`config::broker::template`).
//!
//! `{source}`, `{destination}`, `{delivery_id}`, `{event_type}` (empty
//! when the event has none) and `{/json/pointer}` (the value at that
//! pointer of a JSON body: a string as it is, anything else as its compact
//! JSON; missing, or a body that is not JSON: empty). Anything else in
//! braces, `{}` included, is literal text. One parser and one reading of
//! the values, so the two kinds of template cannot drift apart; what each
//! does with a value (nothing for argv, made safe for a broker's names) is
//! its own.

use std::borrow::Cow;

use serde_json::Value;

/// A piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Literal(String),
    Source,
    Destination,
    DeliveryId,
    EventType,
    Pointer(String),
}

/// What of an event the placeholders read, borrowed from the attempt's
/// job, so config needs no type of `crate::delivery`.
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    pub source: &'a str,
    pub destination: &'a str,
    pub delivery_id: &'a str,
    pub event_type: Option<&'a str>,
    /// The bytes sent (a transform's output, when there is one).
    pub body: &'a [u8],
}

/// Splits `text` into literal text and placeholders; `Err` names a bad
/// pointer.
pub fn parse(text: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        let Some(len) = rest[open..].find('}') else {
            break;
        };
        let part = match &rest[open + 1..open + len] {
            "source" => Some(Part::Source),
            "destination" => Some(Part::Destination),
            "delivery_id" => Some(Part::DeliveryId),
            "event_type" => Some(Part::EventType),
            p if p.starts_with('/') => {
                super::route::check_pointer(p).map_err(|why| format!("{{{p}}} {why}"))?;
                Some(Part::Pointer(p.to_owned()))
            }
            _ => None,
        };
        match part {
            Some(part) => {
                literal.push_str(&rest[..open]);
                if !literal.is_empty() {
                    parts.push(Part::Literal(std::mem::take(&mut literal)));
                }
                parts.push(part);
            }
            None => literal.push_str(&rest[..=open + len]),
        }
        rest = &rest[open + len + 1..];
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        parts.push(Part::Literal(literal));
    }
    Ok(parts)
}

/// One event's placeholder values. The body is parsed once, and only when
/// some part is a pointer.
pub struct Values<'a> {
    event: &'a Event<'a>,
    json: Option<Value>,
}

impl<'a> Values<'a> {
    pub fn new<'p>(event: &'a Event<'a>, parts: impl IntoIterator<Item = &'p Part>) -> Self {
        let uses_body = parts.into_iter().any(|p| matches!(p, Part::Pointer(_)));
        let json = uses_body
            .then(|| serde_json::from_slice(event.body).ok())
            .flatten();
        Values { event, json }
    }

    /// What `part` stands for in this event; a literal is its own text.
    pub fn get<'s>(&'s self, part: &'s Part) -> Cow<'s, str> {
        let e = self.event;
        match part {
            Part::Literal(text) => Cow::Borrowed(text),
            Part::Source => Cow::Borrowed(e.source),
            Part::Destination => Cow::Borrowed(e.destination),
            Part::DeliveryId => Cow::Borrowed(e.delivery_id),
            Part::EventType => Cow::Borrowed(e.event_type.unwrap_or("")),
            Part::Pointer(pointer) => match self.json.as_ref().and_then(|j| j.pointer(pointer)) {
                Some(Value::String(s)) => Cow::Borrowed(s),
                Some(other) => Cow::Owned(other.to_string()),
                None => Cow::Borrowed(""),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_names_and_pointers_are_placeholders_anything_else_is_text() {
        let parts = parse("a{source}{}{x}b{/r/0}{destination}{unclosed").unwrap();
        assert_eq!(
            parts,
            [
                Part::Literal("a".into()),
                Part::Source,
                Part::Literal("{}{x}b".into()),
                Part::Pointer("/r/0".into()),
                Part::Destination,
                Part::Literal("{unclosed".into()),
            ]
        );
        assert!(parse("{/a~2}").unwrap_err().contains("{/a~2}"));
    }

    #[test]
    fn a_pointer_reads_strings_as_they_are_and_other_values_as_json() {
        let event = Event {
            source: "s",
            destination: "d",
            delivery_id: "id",
            event_type: None,
            body: br#"{"s": "x y", "n": [1, 2]}"#,
        };
        let parts = parse("{/s}|{/n}|{/missing}|{event_type}").unwrap();
        let values = Values::new(&event, &parts);
        let text: String = parts.iter().map(|p| values.get(p)).collect();
        assert_eq!(text, "x y|[1,2]||");
    }
}
