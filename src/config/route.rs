//! Which destinations an event goes to: a destination's filter.
//!
//! A filter has two optional parts, and an event must match every part
//! present (no filter at all: every event):
//!
//! * `events = ["push", "invoice.*"]`: the event type matches one of the
//!   globs. An event without a type matches no glob.
//! * `when = { "/ref" = "refs/heads/main", "/repository/full_name" =
//!   ["acme/shop", "acme/web"] }`: for each JSON pointer, the value at it
//!   matches the pattern or one of the list. A string is compared with the
//!   glob; any other value (number, boolean, null, object, array) by its
//!   compact JSON text, so `"/number" = 42` and `"/number" = "42"` both
//!   match `42`. A missing pointer, or a body that is not JSON, matches
//!   nothing.
//!
//! In a glob, `*` matches any run of characters (also none, also dots);
//! every other character matches itself. There is no escape for `*`.
//!
//! Config validation builds a [`Filter`] with [`Filter::parse`], which
//! reports every bad pointer and value under its key; the receiver asks
//! its source's [`Routes`] which destinations take each event, with the
//! body parsed once ([`Body::new`], or [`Body::parsed`] when the receiver
//! has parsed it already) whatever the number of destinations. Matching
//! lives here with parsing, inside config, so that a filter's syntax and
//! meaning are read in one file and config needs no other module.

use std::collections::BTreeMap;

/// A destination's filter, validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Globs over the event type; empty: any type.
    events: Vec<String>,
    /// JSON pointer → patterns, any of which matches.
    when: Vec<(String, Vec<String>)>,
}

impl Filter {
    /// Checks `events` and `when` as written under `at` (a destination's
    /// key); pushes every problem and returns the filter when there is none.
    pub fn parse(
        events: &[String],
        when: &BTreeMap<String, toml::Value>,
        at: &str,
        problems: &mut Vec<String>,
    ) -> Option<Filter> {
        let before = problems.len();
        for (i, glob) in events.iter().enumerate() {
            if glob.is_empty() {
                problems.push(format!(
                    "{at}.events[{i}]: an empty pattern matches no event type; use \"*\" for any"
                ));
            }
        }
        let mut parsed = Vec::with_capacity(when.len());
        for (pointer, value) in when {
            if let Err(why) = check_pointer(pointer) {
                problems.push(format!("{at}.when: {pointer:?} {why}"));
                continue;
            }
            let at = format!("{at}.when.{pointer:?}");
            let patterns = match value {
                toml::Value::Array(list) if list.is_empty() => {
                    problems.push(format!("{at}: an empty list matches nothing"));
                    continue;
                }
                toml::Value::Array(list) => list
                    .iter()
                    .enumerate()
                    .filter_map(|(i, v)| pattern(v, &format!("{at}[{i}]"), problems))
                    .collect(),
                v => pattern(v, &at, problems).into_iter().collect(),
            };
            parsed.push((pointer.clone(), patterns));
        }
        (problems.len() == before).then(|| Filter {
            events: events.to_vec(),
            when: parsed,
        })
    }

    /// Whether every event passes (no filter was written).
    pub fn is_empty(&self) -> bool {
        self.events.is_empty() && self.when.is_empty()
    }

    /// Whether matching needs the body parsed as JSON.
    pub fn reads_body(&self) -> bool {
        !self.when.is_empty()
    }

    pub fn matches(&self, event_type: Option<&str>, body: &Body) -> bool {
        let type_ok = self.events.is_empty()
            || event_type.is_some_and(|t| self.events.iter().any(|g| glob(g, t)));
        type_ok
            && self.when.iter().all(|(pointer, patterns)| {
                body.text_at(pointer)
                    .is_some_and(|text| patterns.iter().any(|p| glob(p, &text)))
            })
    }
}

/// A source's destinations as ingest sees them: each name with its
/// filter, in config order.
#[derive(Debug, Clone, Default)]
pub struct Routes(Vec<(std::sync::Arc<str>, Filter)>);

impl Routes {
    pub fn new(destinations: &[super::DeliverConfig]) -> Self {
        Routes(
            destinations
                .iter()
                .map(|d| (std::sync::Arc::from(d.name.as_str()), d.filter.clone()))
                .collect(),
        )
    }

    /// Whether any filter needs the body parsed as JSON.
    pub fn reads_body(&self) -> bool {
        self.0.iter().any(|(_, f)| f.reads_body())
    }

    /// The destinations that take an event of `event_type` with `body`;
    /// empty: the event is only stored.
    pub fn matching(&self, event_type: Option<&str>, body: &Body) -> Vec<std::sync::Arc<str>> {
        self.0
            .iter()
            .filter(|(_, f)| f.matches(event_type, body))
            .map(|(name, _)| name.clone())
            .collect()
    }
}

/// A body as filters read it: its JSON, parsed once, if any filter needs it.
pub struct Body<'a>(Option<std::borrow::Cow<'a, serde_json::Value>>);

impl Body<'_> {
    /// Parses `bytes` only when `needed`; a body that is not JSON is kept
    /// as "no JSON", which no `when` matches.
    pub fn new(bytes: &[u8], needed: bool) -> Body<'static> {
        Body(
            needed
                .then(|| serde_json::from_slice(bytes).ok())
                .flatten()
                .map(std::borrow::Cow::Owned),
        )
    }

    /// A body already parsed (`None`: not JSON, or not needed).
    pub fn parsed(json: Option<&serde_json::Value>) -> Body<'_> {
        Body(json.map(std::borrow::Cow::Borrowed))
    }

    /// The text a pattern is compared with: a string as it is, anything
    /// else as its compact JSON.
    fn text_at(&self, pointer: &str) -> Option<std::borrow::Cow<'_, str>> {
        match self.0.as_ref()?.pointer(pointer)? {
            serde_json::Value::String(s) => Some(s.as_str().into()),
            other => Some(other.to_string().into()),
        }
    }
}

/// A pattern from a TOML value: a string is a glob, a number or boolean
/// its text; anything else is refused.
fn pattern(value: &toml::Value, at: &str, problems: &mut Vec<String>) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(n) => Some(n.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        toml::Value::Float(f) => match serde_json::Number::from_f64(*f) {
            Some(n) => Some(n.to_string()),
            None => {
                problems.push(format!("{at}: {f} is not a JSON number"));
                None
            }
        },
        other => {
            let what = match other {
                toml::Value::Array(_) => "a list inside a list",
                toml::Value::Table(_) => "a table",
                _ => "a date-time",
            };
            problems.push(format!(
                "{at}: {what} cannot be matched; use a string (globs with *), a number or a boolean"
            ));
            None
        }
    }
}

/// RFC 6901: empty (the whole document), or `/`-separated tokens in which
/// `~` is only ever `~0` or `~1`.
pub(crate) fn check_pointer(pointer: &str) -> Result<(), String> {
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return Err(format!(
            "is not a JSON pointer: it must start with /, e.g. \"/{pointer}\""
        ));
    }
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(
                "is not a JSON pointer: ~ must be followed by 0 or 1 (~0 is ~, ~1 is /)".into(),
            );
        }
    }
    Ok(())
}

/// Whether `text` matches `pattern`, where `*` is any run of characters.
/// Greedy with backtracking to the last star: linear in practice, and
/// O(pattern × text) at worst, never exponential.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn when(toml_text: &str) -> BTreeMap<String, toml::Value> {
        toml::from_str(toml_text).unwrap()
    }

    fn filter(events: &[&str], when_toml: &str) -> Filter {
        let events: Vec<String> = events.iter().map(|s| s.to_string()).collect();
        let mut problems = Vec::new();
        let f = Filter::parse(&events, &when(when_toml), "d", &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        f.unwrap()
    }

    fn problems(events: &[&str], when_toml: &str) -> Vec<String> {
        let events: Vec<String> = events.iter().map(|s| s.to_string()).collect();
        let mut problems = Vec::new();
        assert!(Filter::parse(&events, &when(when_toml), "d", &mut problems).is_none());
        problems
    }

    #[test]
    fn globs_match_any_run_of_characters_and_nothing_else() {
        for (p, t) in [
            ("push", "push"),
            ("*", ""),
            ("*", "anything.at.all"),
            ("invoice.*", "invoice.paid"),
            ("invoice.*", "invoice."),
            ("*.created", "customer.subscription.created"),
            ("a*b*c", "aXXbYYc"),
            ("a*b*c", "abc"),
            ("refs/heads/*", "refs/heads/feature/x"),
        ] {
            assert!(glob(p, t), "{p} ~ {t}");
        }
        for (p, t) in [
            ("push", "pushed"),
            ("push", "Push"),
            ("invoice.*", "invoices.paid"),
            ("a*b*c", "aXXbYY"),
            ("", "x"),
            ("*.created", "created"),
        ] {
            assert!(!glob(p, t), "{p} !~ {t}");
        }
        // Backtracking stays polynomial on a pattern made to be slow.
        let text = "a".repeat(10_000);
        assert!(!glob(&format!("{}b", "*a".repeat(50)), &text));
    }

    #[test]
    fn every_part_of_a_filter_must_match() {
        let f = filter(
            &["push", "pull_request"],
            r#""/ref" = "refs/heads/main"
               "/repository/full_name" = ["acme/shop", "acme/w*"]"#,
        );
        let body = |r: &str, repo: &str| {
            let json = serde_json::json!({"ref": r, "repository": {"full_name": repo}});
            Body::new(json.to_string().as_bytes(), true)
        };
        assert!(f.matches(Some("push"), &body("refs/heads/main", "acme/shop")));
        assert!(f.matches(Some("pull_request"), &body("refs/heads/main", "acme/web")));
        assert!(!f.matches(Some("issues"), &body("refs/heads/main", "acme/shop")));
        assert!(!f.matches(None, &body("refs/heads/main", "acme/shop")));
        assert!(!f.matches(Some("push"), &body("refs/heads/dev", "acme/shop")));
        assert!(!f.matches(Some("push"), &body("refs/heads/main", "other/shop")));
        assert!(!f.matches(Some("push"), &Body::new(b"ref=refs/heads/main", true)));
        assert!(
            !f.matches(Some("push"), &Body::new(b"{}", true)),
            "missing pointer"
        );
    }

    #[test]
    fn numbers_booleans_and_null_compare_by_their_json_text() {
        let f = filter(
            &[],
            r#""/n" = 42
                               "/ok" = true
                               "/x" = ["null", 1.5]"#,
        );
        let yes = Body::new(br#"{"n": 42, "ok": true, "x": null}"#, true);
        assert!(f.matches(None, &yes));
        let also = Body::new(br#"{"n": 42, "ok": true, "x": 1.5}"#, true);
        assert!(f.matches(None, &also));
        let no = Body::new(br#"{"n": "43", "ok": true, "x": null}"#, true);
        assert!(!f.matches(None, &no));
        // The string "42" matches too: the value's text is what is compared.
        let text = Body::new(br#"{"n": "42", "ok": "true", "x": "null"}"#, true);
        assert!(f.matches(None, &text));
    }

    #[test]
    fn no_filter_takes_every_event_without_reading_the_body() {
        let f = filter(&[], "");
        assert!(f.is_empty() && !f.reads_body());
        assert!(f.matches(None, &Body::new(b"not json", false)));
        let typed = filter(&["push"], "");
        assert!(!typed.reads_body());
        assert!(typed.matches(Some("push"), &Body::new(b"not json", false)));
    }

    #[test]
    fn a_bad_filter_is_explained_by_pointer_and_value() {
        let found = problems(
            &["push", ""],
            r#""ref" = "x"
               "/a~2b" = "x"
               "/list" = []
               "/table" = { a = 1 }
               "/mixed" = ["ok", [1]]"#,
        );
        let all = found.join("\n");
        assert!(all.contains("d.events[1]: an empty pattern"), "{all}");
        assert!(
            all.contains(
                r#"d.when: "ref" is not a JSON pointer: it must start with /, e.g. "/ref""#
            ),
            "{all}"
        );
        assert!(
            all.contains(r#"d.when: "/a~2b" is not a JSON pointer: ~ must be followed"#),
            "{all}"
        );
        assert!(
            all.contains(r#"d.when."/list": an empty list matches nothing"#),
            "{all}"
        );
        assert!(
            all.contains(r#"d.when."/table": a table cannot be matched"#),
            "{all}"
        );
        assert!(
            all.contains(r#"d.when."/mixed"[1]: a list inside a list cannot be matched"#),
            "{all}"
        );
        assert_eq!(found.len(), 6, "{all}");
    }

    #[test]
    fn pointer_escapes_reach_keys_with_slashes_and_tildes() {
        let f = filter(&[], r#""/a~1b/c~0d" = "yes""#);
        assert!(f.matches(None, &Body::new(br#"{"a/b": {"c~d": "yes"}}"#, true)));
    }
}
