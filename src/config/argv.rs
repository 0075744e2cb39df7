//! Placeholders in a command destination's argv.
//!
//! Any argv element may hold `{/json/pointer}` (the value at that pointer
//! of a JSON body: a string as it is, anything else as its compact JSON,
//! missing or a body that is not JSON: empty), `{event_type}` (empty when
//! the event has none), `{delivery_id}` and `{source}`. Anything else in
//! braces, `{}` included, is literal text. An element stays one argument
//! whatever its placeholders expand to: no shell ever sees it, so a value
//! that starts with `-` or holds `;`, quotes or spaces is just data (a
//! program that parses options should end them with `--` before it).
//!
//! [`Template::parse`] runs at config time and explains a bad pointer;
//! [`Template::render`] runs per attempt (`crate::delivery::push::command`) and
//! parses the body only when a pointer is used. Both live here, with the
//! config that holds the parsed template, so that config needs no other
//! module of hookbox.

/// What of an event the placeholders read. Borrowed from the dispatcher's
/// job, so config needs no type of `crate::delivery::push`.
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    pub source: &'a str,
    pub delivery_id: &'a str,
    pub event_type: Option<&'a str>,
    /// The exact bytes received.
    pub body: &'a [u8],
}

/// A command's argv, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    args: Vec<Vec<Part>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Pointer(String),
    EventType,
    DeliveryId,
    Source,
}

impl Template {
    /// Parses every element; `Err` names the first bad one, as `(element
    /// index, why)`. The program itself takes no placeholder: an event
    /// (anyone who can push a branch) must never choose what runs.
    pub fn parse(argv: &[String]) -> Result<Template, (usize, String)> {
        let args: Vec<Vec<Part>> = argv
            .iter()
            .enumerate()
            .map(|(i, arg)| parse_arg(arg).map_err(|why| (i, why)))
            .collect::<Result<_, _>>()?;
        if let Some(program) = args.first()
            && program.iter().any(|p| !matches!(p, Part::Literal(_)))
        {
            return Err((
                0,
                "the program takes no placeholder: an event must not choose what runs".into(),
            ));
        }
        Ok(Template { args })
    }

    /// The argv for one delivery of an event: program first.
    pub fn render(&self, event: &Event) -> Vec<String> {
        let uses_body = self
            .args
            .iter()
            .flatten()
            .any(|p| matches!(p, Part::Pointer(_)));
        let json: Option<serde_json::Value> = uses_body
            .then(|| serde_json::from_slice(event.body).ok())
            .flatten();
        self.args
            .iter()
            .map(|parts| {
                let mut arg = String::new();
                for part in parts {
                    match part {
                        Part::Literal(text) => arg.push_str(text),
                        Part::EventType => arg.push_str(event.event_type.unwrap_or("")),
                        Part::DeliveryId => arg.push_str(event.delivery_id),
                        Part::Source => arg.push_str(event.source),
                        Part::Pointer(pointer) => {
                            match json.as_ref().and_then(|j| j.pointer(pointer)) {
                                Some(serde_json::Value::String(s)) => arg.push_str(s),
                                Some(other) => arg.push_str(&other.to_string()),
                                None => {}
                            }
                        }
                    }
                }
                arg
            })
            .collect()
    }
}

fn parse_arg(arg: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut literal = String::new();
    let mut rest = arg;
    while let Some(open) = rest.find('{') {
        let Some(len) = rest[open..].find('}') else {
            break;
        };
        let inner = &rest[open + 1..open + len];
        let part = match inner {
            "event_type" => Some(Part::EventType),
            "delivery_id" => Some(Part::DeliveryId),
            "source" => Some(Part::Source),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn job<'a>(body: &'a [u8], event_type: Option<&'a str>) -> Event<'a> {
        Event {
            source: "github",
            delivery_id: "d-1",
            event_type,
            body,
        }
    }

    fn render(argv: &[&str], job: &Event) -> Vec<String> {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        Template::parse(&argv).unwrap().render(job)
    }

    #[test]
    fn placeholders_expand_inside_and_across_elements() {
        let body = br#"{"ref": "refs/heads/main", "n": 42, "repo": {"full_name": "acme/shop"}, "ok": true}"#;
        let got = render(
            &[
                "/usr/local/bin/deploy",
                "--ref={/ref}",
                "{/repo/full_name}@{event_type}",
                "{source}/{delivery_id}",
                "{/n}",
                "{/ok}",
                "{/repo}",
                "{/missing}",
            ],
            &job(body, Some("push")),
        );
        assert_eq!(
            got,
            [
                "/usr/local/bin/deploy",
                "--ref=refs/heads/main",
                "acme/shop@push",
                "github/d-1",
                "42",
                "true",
                r#"{"full_name":"acme/shop"}"#,
                "",
            ]
        );
    }

    #[test]
    fn other_braces_stay_literal_and_a_non_json_body_expands_to_nothing() {
        let got = render(
            &["find", "{}", "{name}", "{", "}{", "a{/x}b", "{event_type}"],
            &job(b"x=1", None),
        );
        assert_eq!(got, ["find", "{}", "{name}", "{", "}{", "ab", ""]);
    }

    #[test]
    fn a_hostile_value_stays_one_element() {
        let body = br#"{"ref": "--upload-pack=touch /tmp/pwned; rm -rf / \"$(id)\""}"#;
        let got = render(&["git", "fetch", "{/ref}"], &job(body, None));
        assert_eq!(got.len(), 3);
        assert_eq!(
            got[2],
            r#"--upload-pack=touch /tmp/pwned; rm -rf / "$(id)""#
        );
    }

    #[test]
    fn the_program_takes_no_placeholder() {
        for program in ["{/ref}", "/usr/bin/{source}", "{event_type}"] {
            let argv = vec![program.to_owned(), "x".to_owned()];
            let (i, why) = Template::parse(&argv).unwrap_err();
            assert_eq!(i, 0);
            assert!(why.contains("no placeholder"), "{why}");
        }
        // Braces that are no placeholder are a program's own name.
        assert!(Template::parse(&["/opt/{x}/run".to_owned()]).is_ok());
    }

    #[test]
    fn a_bad_pointer_is_refused_naming_its_element() {
        let argv: Vec<String> = ["x", "ok", "{/a~2}"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (i, why) = Template::parse(&argv).unwrap_err();
        assert_eq!(i, 2);
        assert!(why.starts_with("{/a~2} is not a JSON pointer"), "{why}");
    }
}
