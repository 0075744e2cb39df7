//! The manual holds together: every page under `docs/src` is in
//! `SUMMARY.md` and every entry there is a page; every relative link in the
//! book and in README.md names a file that exists and, when it names an
//! anchor in a page, a heading that page has (with mdBook's ids); every
//! `{{#include}}` names a file and an anchor that exist.
//!
//! `.ci/run` also builds the book with `mdbook build docs`, which checks
//! what this does not: that mdBook itself accepts every page.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};

use crate::helpers::hookbox;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn book() -> PathBuf {
    root().join("docs/src")
}

/// Every Markdown page under `docs/src`, relative to it.
fn pages() -> BTreeSet<PathBuf> {
    fn walk(dir: &Path, base: &Path, out: &mut BTreeSet<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, base, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.insert(path.strip_prefix(base).unwrap().to_path_buf());
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(&book(), &book(), &mut out);
    out
}

/// The lines of `text` outside fenced code blocks, with their numbers.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// `line` without its inline code spans, which hold no links.
fn without_code(line: &str) -> String {
    let mut out = String::new();
    for (i, part) in line.split('`').enumerate() {
        if i % 2 == 0 {
            out.push_str(part);
        }
    }
    out
}

/// The targets of the inline links (`[text](target)`) in `line`.
fn links(line: &str) -> Vec<String> {
    let line = without_code(line);
    let mut out = Vec::new();
    let mut rest = line.as_str();
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_owned());
            rest = &rest[end..];
        }
    }
    out
}

/// mdBook's id for a heading: its text without markup, lower-cased, spaces
/// to `-`, anything but letters, digits, `-` and `_` dropped.
fn heading_id(text: &str) -> String {
    // Link text stays, its target goes: `[a](b)` reads as `a`.
    let mut plain = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        plain.push_str(&rest[..i]);
        rest = rest[i + 2..].split_once(')').map_or("", |(_, r)| r);
    }
    plain.push_str(rest);
    plain
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c.to_ascii_lowercase())
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// The ids of a page's headings, numbered as mdBook numbers repeats
/// (`id`, `id-1`, `id-2`, ...).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose(text) {
        let Some(rest) = line.strip_prefix('#') else {
            continue;
        };
        let Some(title) = rest.trim_start_matches('#').strip_prefix(' ') else {
            continue;
        };
        let id = heading_id(title.trim());
        let n = seen.entry(id.clone()).or_insert(0);
        out.insert(if *n == 0 {
            id.clone()
        } else {
            format!("{id}-{n}")
        });
        *n += 1;
    }
    // Explicit anchors: `<a id="...">` or `{#id}`.
    for (_, line) in prose(text) {
        let mut rest = line;
        while let Some(i) = rest.find("id=\"") {
            rest = &rest[i + 4..];
            if let Some(end) = rest.find('"') {
                out.insert(rest[..end].to_owned());
            }
        }
    }
    out
}

/// `path` with `.` and `..` resolved, without touching the file system.
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Every broken link of the Markdown file at `file` (absolute).
fn broken_links(file: &Path, cache: &mut BTreeMap<PathBuf, BTreeSet<String>>) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let dir = file.parent().unwrap();
    let mut problems = Vec::new();
    for (n, line) in prose(&text) {
        for target in links(line) {
            let target = target.split_whitespace().next().unwrap_or("").to_owned();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() {
                file.to_path_buf()
            } else {
                normal(&dir.join(path))
            };
            let here = format!("{}:{n}", file.strip_prefix(root()).unwrap().display());
            if !resolved.exists() {
                problems.push(format!("{here}: `{target}`: no such file"));
                continue;
            }
            if let Some(anchor) = anchor {
                if resolved.extension().is_none_or(|e| e != "md") {
                    continue;
                }
                let ids = cache
                    .entry(resolved.clone())
                    .or_insert_with(|| anchors(&std::fs::read_to_string(&resolved).unwrap()));
                if !ids.contains(anchor) {
                    problems.push(format!("{here}: `{target}`: no heading with that id"));
                }
            }
        }
    }
    // `{{#include path:anchor}}`: the file, and the ANCHOR it names.
    for (n, line) in text.lines().enumerate() {
        let Some(rest) = line.trim().strip_prefix("{{#include ") else {
            continue;
        };
        let spec = rest.trim_end_matches("}}").trim();
        let (path, anchor) = spec.split_once(':').unwrap_or((spec, ""));
        let resolved = normal(&dir.join(path));
        let here = format!("{}:{}", file.strip_prefix(root()).unwrap().display(), n + 1);
        match std::fs::read_to_string(&resolved) {
            Err(_) => problems.push(format!("{here}: include `{path}`: no such file")),
            Ok(included) => {
                if !anchor.is_empty() && !included.contains(&format!("ANCHOR: {anchor}")) {
                    problems.push(format!("{here}: include `{spec}`: no such ANCHOR"));
                }
            }
        }
    }
    problems
}

#[test]
fn every_page_is_in_the_summary_and_every_entry_is_a_page() {
    let summary = std::fs::read_to_string(book().join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<PathBuf> = prose(&summary)
        .into_iter()
        .flat_map(|(_, l)| links(l))
        .map(PathBuf::from)
        .collect();
    let mut pages = pages();
    pages.remove(Path::new("SUMMARY.md"));
    let missing: Vec<_> = pages.difference(&listed).collect();
    let dangling: Vec<_> = listed.difference(&pages).collect();
    assert!(missing.is_empty(), "pages not in SUMMARY.md: {missing:?}");
    assert!(
        dangling.is_empty(),
        "SUMMARY.md entries with no page: {dangling:?}"
    );
}

#[test]
fn every_relative_link_and_anchor_in_the_book_and_the_readme_resolves() {
    let mut cache = BTreeMap::new();
    let mut problems = broken_links(&root().join("README.md"), &mut cache);
    for page in pages() {
        problems.extend(broken_links(&book().join(page), &mut cache));
    }
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_link_the_code_makes_into_the_book_resolves() {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&root().join("src"), &mut files);
    let mut cache = BTreeMap::new();
    let (mut problems, mut seen) = (Vec::new(), 0);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (at, _) in text.match_indices("/docs/src/") {
            let rest = &text[at + "/docs/src/".len()..];
            let end = rest.find(['"', ')', ' ', '\n']).unwrap_or(rest.len());
            let target = &rest[..end];
            let (page, anchor) = target.split_once('#').unwrap_or((target, ""));
            seen += 1;
            let path = book().join(page);
            let Ok(page_text) = std::fs::read_to_string(&path) else {
                problems.push(format!(
                    "{}: docs/src/{target}: no such page",
                    file.display()
                ));
                continue;
            };
            let ids = cache.entry(path).or_insert_with(|| anchors(&page_text));
            if !anchor.is_empty() && !ids.contains(anchor) {
                problems.push(format!(
                    "{}: docs/src/{target}: no such heading",
                    file.display()
                ));
            }
        }
    }
    assert!(
        seen > 0,
        "the dashboard links into the book; the scan found none"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_checker_finds_what_it_must() {
    assert_eq!(
        heading_id("`[sources.deliver]` (optional)"),
        "sourcesdeliver-optional"
    );
    assert_eq!(
        heading_id("HTTPS: alone on a VPS, or behind a proxy"),
        "https-alone-on-a-vps-or-behind-a-proxy"
    );
    let ids = anchors("# A\n\n```\n# not a heading\n```\n## A\n## B c\n");
    assert_eq!(
        ids,
        BTreeSet::from(["a".into(), "a-1".into(), "b-c".into()])
    );
    assert_eq!(
        links("see [x](a.md#b) and `[y](not.md)` and [z](c.md)"),
        ["a.md#b", "c.md"]
    );
    // Under the crate root, since problems name files relative to it.
    let dir = root().join("target/book-check-self-test");
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("p.md");
    std::fs::write(&copy, "# T\n[ok](#t) [bad](#nope) [gone](q.md)\n").unwrap();
    let problems = broken_links(&copy, &mut BTreeMap::new());
    assert_eq!(problems.len(), 2, "{problems:?}");
}

#[test]
fn the_readme_example_config_passes_hookbox_check() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let start = readme.find("```toml\n").expect("README.md shows a config") + 8;
    let end = start + readme[start..].find("```").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hookbox.toml");
    std::fs::write(&config, &readme[start..end]).unwrap();
    let out = hookbox()
        .args(["check", "--config"])
        .arg(&config)
        .env("GITHUB_WEBHOOK_SECRET", "a-long-random-test-secret")
        .env(
            "CI_SIGNING_SECRET",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        )
        .env(
            "DISCORD_WEBHOOK_URL",
            "https://discord.com/api/webhooks/1/test-token",
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "README.md's config fails `hookbox check`:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
