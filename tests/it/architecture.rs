//! The shape of `src/` that issue "Architecture II" set, kept as a check:
//! no top-level module of the crate imports, through any chain, one that
//! imports it back (a lower room never imports a higher one), and the
//! twelve parts `src/lib.rs` names, in its order, are the whole crate.
//!
//! Read from the source text, as a reviewer would: every `crate::name`
//! path and every name at the top of a `use crate::{...}` group, outside
//! comments and outside test code (files named `tests.rs`, folders named
//! `tests`, and what follows a file's `#[cfg(test)]`: test modules sit at
//! the bottom of their files here).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().unwrap() != "tests" {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().unwrap() != "tests.rs"
        {
            out.push(path);
        }
    }
}

/// The file's code before its tests, without comments.
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The top-level modules `code` names.
fn names_used(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // The first segment of each path at the group's own depth.
            let mut depth = 0;
            let mut expect_name = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => expect_name = true,
                    c if c.is_whitespace() => {}
                    _ if expect_name && depth == 0 => {
                        names.insert(ident_at(&group[i..]).to_owned());
                        expect_name = false;
                    }
                    _ => {}
                }
            }
        } else {
            names.insert(ident_at(rest).to_owned());
        }
    }
    names
}

/// The top-level modules from the bottom up, as `src/lib.rs` lists them:
/// each may import only those before it.
const LAYERS: [&str; 12] = [
    "config",
    "signature",
    "support",
    "telemetry",
    "store",
    "edge",
    "delivery",
    "alerts",
    "ingress",
    "catchup",
    "service",
    "cli",
];

/// Each top-level module and the top-level modules its code names.
fn top_level_edges() -> (BTreeSet<String>, BTreeMap<String, BTreeSet<String>>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let top_of = |path: &Path| -> String {
        let first = path
            .strip_prefix(&src)
            .unwrap()
            .components()
            .next()
            .unwrap();
        let name = first.as_os_str().to_str().unwrap();
        name.strip_suffix(".rs").unwrap_or(name).to_owned()
    };
    let tops: BTreeSet<String> = files
        .iter()
        .map(|f| top_of(f))
        .filter(|t| t != "lib" && t != "main")
        .collect();
    assert!(tops.len() > 5, "found only {tops:?}");
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let top = top_of(file);
        if !tops.contains(&top) {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        for name in names_used(&code) {
            if name != top && tops.contains(&name) {
                edges.entry(top.clone()).or_default().insert(name);
            }
        }
    }
    (tops, edges)
}

#[test]
fn the_crate_is_the_twelve_parts_of_the_map_each_importing_only_those_below() {
    let (tops, edges) = top_level_edges();
    let layers: BTreeSet<String> = LAYERS.iter().map(|l| l.to_string()).collect();
    assert_eq!(
        tops, layers,
        "the top-level modules are not lib.rs's twelve"
    );
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let listed: Vec<usize> = LAYERS
        .iter()
        .map(|l| {
            lib.find(&format!("[`{l}`]"))
                .unwrap_or_else(|| panic!("lib.rs never links {l}"))
        })
        .collect();
    assert!(
        listed.is_sorted(),
        "lib.rs does not name the parts from the bottom up"
    );
    for (from, to) in edges
        .iter()
        .flat_map(|(f, ts)| ts.iter().map(move |t| (f, t)))
    {
        let rank = |m: &str| LAYERS.iter().position(|l| *l == m).unwrap();
        assert!(
            rank(to) < rank(from),
            "{from} imports {to}, which sits above it"
        );
    }
}

#[test]
fn no_top_level_module_imports_one_that_imports_it_back() {
    let (tops, edges) = top_level_edges();
    // A module reaches itself back through its imports: a cycle.
    for start in &tops {
        let mut seen = BTreeSet::new();
        let mut path = vec![start.clone()];
        if let Some(cycle) = back_to(start, start, &edges, &mut seen, &mut path) {
            panic!("a cycle of top-level modules: {}", cycle.join(" -> "));
        }
    }
}

fn back_to(
    start: &str,
    at: &str,
    edges: &BTreeMap<String, BTreeSet<String>>,
    seen: &mut BTreeSet<String>,
    path: &mut Vec<String>,
) -> Option<Vec<String>> {
    for next in edges.get(at).into_iter().flatten() {
        path.push(next.clone());
        if next == start {
            return Some(path.clone());
        }
        if seen.insert(next.clone())
            && let Some(cycle) = back_to(start, next, edges, seen, path)
        {
            return Some(cycle);
        }
        path.pop();
    }
    None
}

#[test]
fn the_reader_finds_every_name_of_a_use_group() {
    let code = "use crate::{config::{A, b::C}, store, delivery::x};\nlet y = crate::support::clock::now();";
    let names: Vec<String> = names_used(code).into_iter().collect();
    assert_eq!(names, ["config", "delivery", "store", "support"]);
    assert_eq!(code_of("a // crate::x\nb\n#[cfg(test)]\ncrate::y"), "a \nb");
}
