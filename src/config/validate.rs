//! Validation of the whole config: each table is checked by its own
//! module, and here what no single table can check (source names unique,
//! the listeners apart), with every problem collected before anything
//! binds a port or opens the database.

use std::collections::HashSet;

use super::{Config, ConfigError, Kinds, RawConfig, admin, alerts, edge, ops, server, source, tls};

/// Checks every field and resolves every secret, reporting all problems;
/// a source's `kind` must be one of `kinds`.
pub fn validate(raw: RawConfig, origin: String, kinds: &dyn Kinds) -> Result<Config, ConfigError> {
    let mut problems = Vec::new();
    let server = &raw.server;
    server::validate(server, &mut problems);
    ops::validate(&raw.retention, &raw.backup, &raw.search, &mut problems);
    let admin = admin::validate(&raw.admin, &mut problems);
    let edge = edge::validate(&raw.edge, server, &mut problems);
    let tls = tls::validate(server.tls.as_ref(), &server.database, &mut problems);
    let alerts = alerts::validate(&raw.alerts, &mut problems);

    let mut names = HashSet::new();
    let mut sources = Vec::new();
    for (i, src) in raw.sources.iter().enumerate() {
        let at = format!("sources[{i}] ({:?})", src.name);
        if !valid_name(&src.name) {
            problems.push(format!(
                "{at}.name: use 1-64 characters from a-z, 0-9, '-' and '_' (it becomes the route /hooks/<name>)"
            ));
        }
        if !names.insert(src.name.as_str()) {
            problems.push(format!("{at}.name: another source has this name"));
        }
        // Even a disabled source must name a kind there is: a typo
        // should not wait for the day it is enabled.
        let kind = source::find_kind(src, kinds, &at, &mut problems);
        let Some(kind) = kind.filter(|_| src.enabled) else {
            continue;
        };
        if let Some(source) = source::validate(src, kind, server, &at, &mut problems) {
            sources.push(source);
        }
    }

    if problems.is_empty() {
        Ok(Config {
            server: raw.server.clone(),
            admin,
            retention: raw.retention.clone(),
            backup: raw.backup.clone(),
            search: raw.search.clone(),
            edge,
            tls,
            sources,
            alerts,
            origin,
            disabled_defaults: Vec::new(),
            raw,
        })
    } else {
        Err(ConfigError { origin, problems })
    }
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}
