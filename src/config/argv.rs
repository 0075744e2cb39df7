//! Placeholders in a command destination's argv.
//!
//! Any argv element but the program may hold the placeholders of
//! [`super::placeholders`] (`{source}`, `{destination}`, `{delivery_id}`,
//! `{event_type}`, `{/json/pointer}`). An element stays one argument
//! whatever its placeholders expand to: no shell ever sees it, so a value
//! that starts with `-` or holds `;`, quotes or spaces is just data (a
//! program that parses options should end them with `--` before it).
//!
//! [`Template::parse`] runs at config time and explains a bad pointer;
//! [`Template::render`] runs per attempt (`crate::delivery::push::command`) and
//! parses the body only when a pointer is used. Both live here, with the
//! config that holds the parsed template, so that config needs no other
//! module of hookbox.

pub use super::placeholders::Event;
use super::placeholders::{Part, Values, parse};

/// A command's argv, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    args: Vec<Vec<Part>>,
}

impl Template {
    /// Parses every element; `Err` names the first bad one, as `(element
    /// index, why)`. The program itself takes no placeholder: an event
    /// (anyone who can push a branch) must never choose what runs.
    pub fn parse(argv: &[String]) -> Result<Template, (usize, String)> {
        let args: Vec<Vec<Part>> = argv
            .iter()
            .enumerate()
            .map(|(i, arg)| parse(arg).map_err(|why| (i, why)))
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
        let values = Values::new(event, self.args.iter().flatten());
        self.args
            .iter()
            .map(|parts| parts.iter().map(|p| values.get(p)).collect())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job<'a>(body: &'a [u8], event_type: Option<&'a str>) -> Event<'a> {
        Event {
            source: "github",
            destination: "run",
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
