//! Running one compiled program over one event: the transform process's
//! work ([`super::child`]), kept free of I/O so it reads on its own.
//!
//! The input `.` is the body as JSON; a body that is not JSON is its
//! UTF-8 text as a string, and one that is not UTF-8 either cannot be
//! transformed. A body nested deeper than [`MAX_DEPTH`] is refused before
//! it is parsed: the parser and jq's recursive filters (`walk`, `..`)
//! would otherwise walk it on the stack.

use jaq_core::{Ctx, Vars};
use jaq_json::Val;

use crate::config::transform::{Data, Filter};

/// The deepest nesting of arrays and objects a body may have. Webhook
/// payloads nest a dozen levels at most.
pub const MAX_DEPTH: usize = 256;

/// What a run produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// One output that is not a string, as compact JSON.
    Json(Vec<u8>),
    /// One string output: its text.
    Text(Vec<u8>),
    /// No output: nothing is sent.
    Nothing,
    /// Why it failed: an error, several outputs, or an input it cannot take.
    Failed(String),
    /// No transform process could be started (hookbox's trouble, not the
    /// program's): never sent over a pipe.
    Unavailable(String),
}

/// Runs `filter` with `.` = `body` and `$event` = `event`.
pub fn run(filter: &Filter, event: Val, body: &[u8]) -> Reply {
    let input = match input(body) {
        Ok(input) => input,
        Err(why) => return Reply::Failed(why),
    };
    let ctx = Ctx::<Data>::new(&filter.lut, Vars::new([event]));
    let mut outputs = filter.id.run((ctx, input));
    let first = match outputs.next() {
        None => return Reply::Nothing,
        Some(Err(e)) => return Reply::Failed(describe(e)),
        Some(Ok(value)) => value,
    };
    match outputs.next() {
        None => encode(first),
        Some(Ok(_)) => Reply::Failed(
            "the program gave more than one output (collect them with [...] or pick one with first(...))"
                .to_owned(),
        ),
        Some(Err(e)) => Reply::Failed(describe(e)),
    }
}

/// The body as the program's input.
pub fn input(body: &[u8]) -> Result<Val, String> {
    if too_deep(body) {
        return Err(format!(
            "the body nests deeper than {MAX_DEPTH} levels, so it is not transformed"
        ));
    }
    if let Ok(value) = jaq_json::read::parse_single(body) {
        return Ok(value);
    }
    match std::str::from_utf8(body) {
        Ok(text) => Ok(Val::utf8_str(text.to_owned())),
        Err(_) => {
            Err("the body is neither JSON nor UTF-8 text, so it cannot be transformed".into())
        }
    }
}

/// Whether `body`, read as JSON, opens more than [`MAX_DEPTH`] arrays or
/// objects at once (brackets inside strings do not count). Linear, and
/// wrong only for text that is not JSON, which is then a string anyway.
fn too_deep(body: &[u8]) -> bool {
    // Nesting never exceeds the number of opening brackets, and counting
    // them is one vectorised pass: a webhook body has far fewer than
    // MAX_DEPTH, so the walk below (a branch per byte, as long again as
    // parsing the body) is seldom needed. Summed a byte at a time per
    // chunk (255 cannot overflow a u8), the count is ten times faster than
    // `filter().count()`: 0.1 against 1 µs for a 2 KiB body.
    let opening: usize = body
        .chunks(255)
        .map(|chunk| {
            let n: u8 = chunk
                .iter()
                .map(|&b| u8::from(b == b'[' || b == b'{'))
                .sum();
            usize::from(n)
        })
        .sum();
    if opening <= MAX_DEPTH {
        return false;
    }
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in body {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

fn encode(value: Val) -> Reply {
    match value {
        Val::TStr(text) => Reply::Text(text.to_vec()),
        Val::BStr(bytes) => Reply::Text(bytes.to_vec()),
        other => Reply::Json(other.to_string().into_bytes()),
    }
}

/// A jq error as the delivery's reason.
fn describe(e: jaq_core::Exn<'_, Val>) -> String {
    match e.get_err() {
        Ok(error) => format!("the program failed: {error}"),
        Err(other) => match other.get_halt() {
            Ok(code) => format!("the program called halt (exit code {code})"),
            Err(_) => "the program failed".to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::transform::compile;

    fn run_on(code: &str, body: &str) -> Reply {
        let filter = compile(code).unwrap();
        let event =
            jaq_json::read::parse_single(br#"{"source":"gh","event_type":"push"}"#).unwrap();
        run(&filter, event, body.as_bytes())
    }

    #[test]
    fn one_output_is_sent_as_json_or_text() {
        assert_eq!(
            run_on("{t: $event.event_type, n: (.a + 1)}", r#"{"a": 41}"#),
            Reply::Json(br#"{"t":"push","n":42}"#.to_vec())
        );
        assert_eq!(
            run_on(r#""\(.a) from \($event.source)""#, r#"{"a":"x"}"#),
            Reply::Text(b"x from gh".to_vec())
        );
        assert_eq!(
            run_on("ascii_upcase", "plain text"),
            Reply::Text(b"PLAIN TEXT".to_vec())
        );
    }

    #[test]
    fn no_output_several_outputs_and_errors_are_told_apart() {
        assert_eq!(run_on("select(.a == 2)", r#"{"a": 1}"#), Reply::Nothing);
        assert_eq!(run_on("empty", "{}"), Reply::Nothing);
        let Reply::Failed(why) = run_on(".[]", "[1,2]") else {
            panic!()
        };
        assert!(why.contains("more than one output"), "{why}");
        let Reply::Failed(why) = run_on(r#"error("nope")"#, "{}") else {
            panic!()
        };
        assert!(why.contains("nope"), "{why}");
        let Reply::Failed(why) = run_on(".a.b", r#"{"a": 3}"#) else {
            panic!()
        };
        assert!(why.starts_with("the program failed: "), "{why}");
    }

    #[test]
    fn a_body_that_is_not_utf8_or_nests_too_deep_is_refused() {
        let filter = compile(".").unwrap();
        let Reply::Failed(why) = run(&filter, Val::Null, b"\xff\xfe") else {
            panic!()
        };
        assert!(why.contains("neither JSON nor UTF-8"), "{why}");
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        let Reply::Failed(why) = run(&filter, Val::Null, deep.as_bytes()) else {
            panic!()
        };
        assert!(why.contains("nests deeper"), "{why}");
        let fine = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(matches!(
            run(&filter, Val::Null, fine.as_bytes()),
            Reply::Json(_)
        ));
        // More brackets than MAX_DEPTH, side by side, nest two deep.
        let wide = format!("[{}]", vec!["{}"; MAX_DEPTH * 2].join(","));
        assert!(matches!(
            run(&filter, Val::Null, wide.as_bytes()),
            Reply::Json(_)
        ));
        // Brackets in strings are text.
        let text = format!(r#"{{"a": "{}"}}"#, "[".repeat(1000));
        assert!(matches!(
            run(&filter, Val::Null, text.as_bytes()),
            Reply::Json(_)
        ));
    }
}
