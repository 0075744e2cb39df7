//! `transform`: a destination's jq program, compiled with the jaq crates.
//!
//! Validation compiles every program once ([`compile`]) so that `hookbox
//! check` reports a mistake with its line and column before anything
//! runs; the compiled filter is dropped there, and compiled again, once,
//! by each transform process (`crate::delivery::transform`), which is
//! what runs it. Both go through [`compile`], so a program `check` takes
//! is one the runtime takes.
//!
//! What a program may use is jq's standard library less `env` (hookbox's
//! environment holds its secrets; the transform process runs with an
//! empty one besides); `$event` is the one global variable.

use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, data};
use jaq_json::Val;

/// The data a compiled program runs with: only its lookup table.
pub type Data = data::JustLut<Val>;

/// A compiled program.
pub type Filter = jaq_core::Filter<Data>;

/// Filters of the standard library a transform may not call.
const WITHHELD: &[&str] = &["env"];

/// The global variable every program sees, bound to the event's metadata.
pub const EVENT_VAR: &str = "$event";

/// Compiles `code`; the error is every problem found, each `line L,
/// column C: what`, joined by `; `.
pub fn compile(code: &str) -> Result<Filter, String> {
    let defs = jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs());
    let funs = jaq_core::funs::<Data>()
        .chain(jaq_std::funs::<Data>())
        .chain(jaq_json::funs::<Data>())
        .filter(|(name, _, _)| !WITHHELD.contains(name));
    let arena = Arena::default();
    let loader = Loader::new(defs);
    let modules = loader
        .load(&arena, File { code, path: () })
        .map_err(|errors| {
            let mut found = Vec::new();
            for (_, error) in errors {
                match error {
                    jaq_core::load::Error::Io(e) => {
                        for (path, why) in e {
                            found.push(format!(
                                "{}: cannot import {path:?}: {why}",
                                place(code, path)
                            ));
                        }
                    }
                    jaq_core::load::Error::Lex(e) => {
                        for (expected, at) in e {
                            found.push(format!(
                                "{}: expected {}",
                                place(code, at),
                                expected.as_str()
                            ));
                        }
                    }
                    jaq_core::load::Error::Parse(e) => {
                        for (expected, at) in e {
                            let what = if at.is_empty() {
                                "the end of the program".to_owned()
                            } else {
                                format!("{at:?}")
                            };
                            found.push(format!(
                                "{}: expected {}, found {what}",
                                place(code, at),
                                expected.as_str()
                            ));
                        }
                    }
                }
            }
            found.join("; ")
        })?;
    Compiler::default()
        .with_funs(funs)
        .with_global_vars([EVENT_VAR])
        .compile(modules)
        .map_err(|errors| {
            errors
                .into_iter()
                .flat_map(|(_, e)| e)
                .map(|(name, undefined)| {
                    format!(
                        "{}: undefined {} {name}",
                        place(code, name),
                        undefined.as_str()
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        })
}

/// `line L, column C` (1-based, columns in characters) of `part`, a slice
/// of `whole`; the end of the program when `part` lies elsewhere (a
/// token the parser made up).
fn place(whole: &str, part: &str) -> String {
    let (start, end) = (
        whole.as_ptr() as usize,
        whole.as_ptr() as usize + whole.len(),
    );
    let at = part.as_ptr() as usize;
    let offset = if (start..=end).contains(&at) {
        at - start
    } else {
        whole.len()
    };
    let before = &whole[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit_once('\n')
        .map_or(before, |(_, last)| last)
        .chars()
        .count()
        + 1;
    format!("line {line}, column {column}")
}

/// Checks `code` as `at.transform`; pushes its compile errors.
pub fn check(code: &str, at: &str, problems: &mut Vec<String>) {
    if let Err(why) = compile(code) {
        problems.push(format!("{at}.transform: {why}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_compiles_and_a_mistake_says_where() {
        assert!(compile(".").is_ok());
        assert!(compile("{content: \"\\(.a) by \\($event.source)\"}").is_ok());
        let e = compile(". | {a: 1,\n  b: (.x | }").err().unwrap();
        assert!(e.starts_with("line 2, column "), "{e}");
        let e = compile("map(.x) | nosuch(1)").err().unwrap();
        assert_eq!(e, "line 1, column 11: undefined filter nosuch");
        let e = compile("$nope").err().unwrap();
        assert!(e.contains("undefined variable $nope"), "{e}");
    }

    #[test]
    fn the_environment_is_not_reachable() {
        for withheld in ["env", "$ENV", "env.HOME"] {
            assert!(compile(withheld).is_err(), "{withheld}");
        }
    }
}
