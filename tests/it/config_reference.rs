//! The configuration reference stays complete and true: every key the
//! config types accept is documented in `config.example.toml` and in
//! the book's configuration reference (docs/src/reference.md), nothing documented is a key the
//! code refuses, and the example itself loads with `hookbox check`.
//!
//! The accepted keys come from the code, not from a list kept here: each
//! `Raw*` type is `deny_unknown_fields`, so serde's answer to an unknown
//! key at some place in the file names every field that place takes. The
//! test asks that question at the root, then again inside every field that
//! turns out to be a table or an array of tables, down to the leaves. A key
//! added to any config type is therefore found without touching this file.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use hookbox::config::RawConfig;

use crate::helpers::hookbox;

/// A key no config type has; serde's refusal of it lists the real ones.
const PROBE: &str = "__hookbox_probe__";

/// A value every secret reference of the example resolves to in the test:
/// valid for every kind, including the Standard Webhooks `whsec_` + base64
/// form (it is the published Standard Webhooks test-vector secret).
const TEST_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn repo_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(name)
}

fn read(name: &str) -> String {
    std::fs::read_to_string(repo_file(name)).unwrap_or_else(|e| panic!("reading {name}: {e}"))
}

#[derive(Clone, Copy, Debug)]
enum Shape {
    Table,
    ArrayOfTables,
}

/// The fields the table at `path` accepts, or `None` when `path` does not
/// lead to a struct table (a leaf value such as a string, number or list).
fn fields_at(path: &[(String, Shape)]) -> Option<Vec<String>> {
    let mut probe = toml::Table::new();
    probe.insert(PROBE.to_owned(), toml::Value::Integer(1));
    let mut value = toml::Value::Table(probe);
    for (name, shape) in path.iter().rev() {
        let inner = match shape {
            Shape::Table => value,
            Shape::ArrayOfTables => toml::Value::Array(vec![value]),
        };
        let mut table = toml::Table::new();
        table.insert(name.clone(), inner);
        value = toml::Value::Table(table);
    }
    let message = match value.try_into::<RawConfig>() {
        Ok(_) => return None,
        Err(e) => e.to_string(),
    };
    let marker = format!("unknown field `{PROBE}`");
    let rest = &message[message.find(&marker)? + marker.len()..];
    // serde: "expected one of `a`, `b`", "expected `a` or `b`", "expected
    // `a`", or "there are no fields"; toml adds "in `table`" on a new line.
    let fields = rest
        .lines()
        .next()
        .unwrap_or_default()
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    Some(fields)
}

/// What the config accepts: every key path, dotted (`sources.deliver.url`;
/// an array of tables has no index), split into tables and leaf keys.
#[derive(Default)]
struct Accepted {
    keys: BTreeSet<String>,
    tables: BTreeSet<String>,
}

fn collect(path: &mut Vec<(String, Shape)>, out: &mut Accepted) {
    assert!(path.len() < 8, "config nesting deeper than expected");
    let fields = fields_at(path).unwrap_or_else(|| panic!("expected a table at {path:?}"));
    for field in fields {
        let mut dotted: Vec<&str> = path.iter().map(|(n, _)| n.as_str()).collect();
        dotted.push(&field);
        let dotted = dotted.join(".");
        let mut is_table = false;
        for shape in [Shape::Table, Shape::ArrayOfTables] {
            path.push((field.clone(), shape));
            is_table = fields_at(path).is_some();
            if is_table {
                collect(path, out);
            }
            path.pop();
            if is_table {
                break;
            }
        }
        if is_table {
            out.tables.insert(dotted);
        } else {
            out.keys.insert(dotted);
        }
    }
}

fn accepted() -> Accepted {
    let mut out = Accepted::default();
    collect(&mut Vec::new(), &mut out);
    out
}

/// Key paths of a parsed TOML value (tables, arrays of tables).
fn value_keys(prefix: &str, table: &toml::Table, out: &mut BTreeSet<String>) {
    for (key, value) in table {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        out.insert(path.clone());
        match value {
            toml::Value::Table(t) => value_keys(&path, t, out),
            toml::Value::Array(items) => {
                for item in items {
                    if let toml::Value::Table(t) = item {
                        value_keys(&path, t, out);
                    }
                }
            }
            _ => {}
        }
    }
}

/// A `key = …` line's key, if the line is one.
fn assignment_key(line: &str) -> Option<&str> {
    let (key, _) = line.split_once('=')?;
    let key = key.trim_end();
    let ok = !key.is_empty()
        && key.starts_with(|c: char| c.is_ascii_lowercase())
        && key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    ok.then_some(key)
}

/// `[a.b]` or `[[a]]` alone on a commented line (prose that merely
/// starts with a bracket is not a header).
fn commented_header(text: &str) -> Option<&str> {
    let head = text.split('#').next().unwrap_or_default().trim();
    let name = head
        .strip_prefix('[')?
        .strip_suffix(']')?
        .trim_matches(['[', ']']);
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.');
    ok.then_some(name)
}

/// Keys the example documents: those set (parsed as TOML) plus those shown
/// commented out (`# key = …`), each under the table header above it.
fn documented_in_example(text: &str) -> BTreeSet<String> {
    let parsed: toml::Table = toml::from_str(text).expect("config.example.toml is TOML");
    let mut out = BTreeSet::new();
    value_keys("", &parsed, &mut out);
    let mut table = String::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            let header = line.split('#').next().unwrap_or_default().trim();
            table = header.trim_matches(['[', ']']).trim().to_owned();
            continue;
        }
        let Some(commented) = line.strip_prefix('#') else {
            continue;
        };
        // A table shown commented out (`# [server.tls]`) heads the
        // commented keys below it, until the next header.
        if let Some(header) = commented_header(commented.trim_start()) {
            table = header.to_owned();
            continue;
        }
        if let Some(key) = assignment_key(commented.trim_start()) {
            out.insert(if table.is_empty() {
                key.to_owned()
            } else {
                format!("{table}.{key}")
            });
        }
    }
    out
}

/// The book's configuration reference page.
const REFERENCE: &str = "docs/src/reference.md";

/// Keys named in the first column of the reference's tables (`| \`a.b\` |`).
fn documented_in_reference(reference: &str) -> BTreeSet<String> {
    reference
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`'))
        .map(|(key, _)| key.to_owned())
        .collect()
}

#[test]
fn the_key_probe_finds_the_known_keys_and_tables() {
    let accepted = accepted();
    for key in [
        "server.listen",
        "admin.token",
        "retention.body_days",
        "backup.keep",
        "sources.name",
        "sources.hmac.header",
        "sources.deliver.url",
        "sources.github_redelivery.repo",
        "sources.stripe_backfill.api_key",
    ] {
        assert!(
            accepted.keys.contains(key),
            "{key} not found; found {:#?}",
            accepted.keys
        );
    }
    for table in ["server", "sources", "sources.deliver", "sources.hmac"] {
        assert!(accepted.tables.contains(table), "{table} is a table");
    }
    assert!(!accepted.keys.contains("sources.deliver"));
}

#[test]
fn every_config_key_is_documented_in_the_example_and_the_reference() {
    let accepted = accepted();
    let example = documented_in_example(&read("config.example.toml"));
    let reference_text = read(REFERENCE);
    let reference = documented_in_reference(&reference_text);

    let mut problems = Vec::new();
    for key in &accepted.keys {
        if !example.contains(key) {
            problems.push(format!(
                "`{key}` is accepted by the code but not in config.example.toml: add it (commented out if it must not be set there) with what it does, its default and its allowed values"
            ));
        }
        if !reference.contains(key) {
            problems.push(format!(
                "`{key}` is accepted by the code but not in docs/src/reference.md: add a row: | `{key}` | default | meaning |"
            ));
        }
    }
    for table in &accepted.tables {
        if !reference_text.contains(&format!("[{table}]")) {
            problems.push(format!(
                "the table `{table}` has no heading in docs/src/reference.md (write `[{table}]` or `[[{table}]]` in it)"
            ));
        }
    }
    for key in example
        .iter()
        .filter(|k| !accepted.keys.contains(*k) && !accepted.tables.contains(*k))
    {
        problems.push(format!(
            "`{key}` is in config.example.toml but the code accepts no such key"
        ));
    }
    for key in reference.difference(&accepted.keys) {
        problems.push(format!(
            "`{key}` is in docs/src/reference.md but the code accepts no such key"
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The secret references the example's live (uncommented) lines use.
fn references(text: &str, prefix: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| l.split('"').skip(1).step_by(2))
        .filter_map(|s| s.strip_prefix(prefix))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_example_config_loads_with_hookbox_check() {
    let text = read("config.example.toml");
    let creds = tempfile::tempdir().unwrap();
    let mut cmd = hookbox();
    cmd.args(["check", "--config"])
        .arg(repo_file("config.example.toml"))
        .env("CREDENTIALS_DIRECTORY", creds.path());
    let env_vars = references(&text, "env:");
    for var in &env_vars {
        cmd.env(var, TEST_SECRET);
    }
    let creds_named = references(&text, "cred:");
    for name in &creds_named {
        std::fs::write(creds.path().join(name), format!("{TEST_SECRET}\n")).unwrap();
    }
    assert!(
        !env_vars.is_empty() && !creds_named.is_empty(),
        "the example shows both env: and cred: references"
    );
    assert!(
        references(&text, "file:").is_empty(),
        "file: references in live lines would need files on this machine; show them commented"
    );

    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "hookbox check refused config.example.toml:\n{stderr}{stdout}"
    );
    assert!(
        !stdout.contains("[redacted]"),
        "the example holds a literal secret (check printed [redacted]): use env:, file: or cred:\n{stdout}"
    );
    assert!(!stdout.contains(TEST_SECRET) && !stderr.contains(TEST_SECRET));

    // Every kind is shown, each with its catch-up or delivery where it has one.
    let parsed: toml::Table = toml::from_str(&text).unwrap();
    let sources = parsed["sources"].as_array().unwrap();
    let kinds: BTreeSet<&str> = sources
        .iter()
        .filter_map(|s| s.get("kind")?.as_str())
        .collect();
    for kind in [
        "github", "stripe", "shopify", "standard", "gitlab", "slack", "hmac",
    ] {
        assert!(
            kinds.contains(kind),
            "no source of kind {kind:?} in the example"
        );
    }
    // A table, or an array of tables (`[[sources.deliver]]`), holding `key`.
    let has = |kind: &str, table: &str, key: &str| {
        sources.iter().any(|s| {
            s.get("kind").and_then(|k| k.as_str()) == Some(kind)
                && match s.get(table) {
                    Some(toml::Value::Array(tables)) => tables.iter().any(|t| t.get(key).is_some()),
                    Some(t) => t.get(key).is_some(),
                    None => false,
                }
        })
    };
    assert!(has("github", "deliver", "url"));
    assert!(has("github", "github_redelivery", "repo"));
    assert!(has("stripe", "deliver", "command"));
    assert!(has("stripe", "stripe_backfill", "api_key"));
}

/// A duration as the reference writes a bound: its largest whole unit.
fn bound(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ] {
        if ms > 0 && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    if ms == 0 {
        "0s".into()
    } else {
        format!("{ms}ms")
    }
}

#[test]
fn every_bounded_key_states_its_range_in_the_reference() {
    use hookbox::config::limits::{COUNTS, DURATIONS};
    let reference = read(REFERENCE);
    let ranges = DURATIONS
        .iter()
        .map(|l| (l.key, bound(l.min), bound(l.max)))
        .chain(
            COUNTS
                .iter()
                .map(|l| (l.key, l.min.to_string(), l.max.to_string())),
        );
    for (key, min, max) in ranges {
        let row = reference
            .lines()
            .find(|l| l.starts_with(&format!("| `{key}` |")))
            .unwrap_or_else(|| panic!("no reference row for `{key}`"));
        let range = format!("`{min}`–`{max}`");
        assert!(
            row.contains(&range),
            "the reference's row for `{key}` must state its range as {range}: {row}"
        );
    }
}
