//! Config loading: any text → `hookbox::config::from_toml` → a `Config` or
//! a list of problems, never a panic; and what `hookbox check` prints (the
//! redacted TOML of a valid config, or the problems of an invalid one)
//! never shows a literal secret of the input.
//!
//! Two checks:
//! * non-interference: a valid config's redacted output is the same when
//!   every literal secret (and the password of `deliver.url`) is replaced
//!   by another literal, so no secret value can reach it;
//! * no echo: a literal secret of 8 or more characters found at a secret
//!   key of the input (`admin.token`, `sources[].secrets`,
//!   `sources[].deliver.signing_secret`, the password of
//!   `sources[].deliver.url`, `sources[].github_redelivery.token` and
//!   `.private_key`, `sources[].stripe_backfill.api_key`,
//!   `sources[].gitlab_redelivery.token`, `sources[].paddle_replay.api_key`,
//!   `sources[].square_backfill.access_token`) does not appear
//!   in the output, valid or not, unless the input also has it at a key
//!   that is not secret.
//!
//! `file:` references are limited to one prepared file, so the fuzzer
//! reads nothing else on the machine (`file:/dev/zero` would only test the
//! machine's memory); `cred:` reads from a prepared directory.
#![no_main]

use std::sync::Once;

use hookbox::config::{Config, RawConfig};
use libfuzzer_sys::fuzz_target;

const DIR: &str = "/tmp/hookbox-fuzz-config";
const REPLACED: &str = "replaced-literal-secret";

fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        std::fs::create_dir_all(DIR).unwrap();
        std::fs::write(format!("{DIR}/secret"), "file-secret-value\n").unwrap();
        std::fs::write(format!("{DIR}/cred"), "whsec_Y3JlZC1zZWNyZXQtdmFsdWU=").unwrap();
        // SAFETY: set once, before any other thread of this process reads
        // the environment (libFuzzer runs the target on one thread).
        unsafe {
            std::env::set_var("HOOKBOX_FUZZ_SECRET", "env-secret-value");
            std::env::set_var("CREDENTIALS_DIRECTORY", DIR);
            std::env::remove_var("STATE_DIRECTORY");
        }
    });
}

fn is_reference(s: &str) -> bool {
    ["env:", "file:", "cred:"].iter().any(|p| s.starts_with(p))
}

/// What `hookbox check` prints.
fn output(result: &Result<Config, hookbox::config::ConfigError>) -> String {
    match result {
        Ok(c) => format!(
            "# hookbox configuration from {} (valid)\n{}",
            c.origin,
            c.redacted_toml()
        ),
        Err(e) => e.to_string(),
    }
}

/// The strings of a generic TOML value at secret keys (`secret`) and
/// everywhere else, keys included (`public`).
fn split_strings(table: &toml::Table, secret: &mut Vec<String>, public: &mut Vec<String>) {
    fn all(v: &toml::Value, into: &mut Vec<String>) {
        match v {
            toml::Value::String(s) => into.push(s.clone()),
            toml::Value::Array(a) => a.iter().for_each(|v| all(v, into)),
            toml::Value::Table(t) => t.iter().for_each(|(k, v)| {
                into.push(k.clone());
                all(v, into)
            }),
            other => into.push(other.to_string()),
        }
    }
    fn url_password(url: &str, secret: &mut Vec<String>, public: &mut Vec<String>) {
        match url::Url::parse(url) {
            Ok(mut u) if u.password().is_some() => {
                secret.push(u.password().unwrap().to_owned());
                let _ = u.set_password(None);
                public.push(u.to_string());
            }
            _ => public.push(url.to_owned()),
        }
    }
    let secret_keys: &[(&str, &[&str])] = &[
        ("deliver", &["signing_secret"]),
        ("github_redelivery", &["token", "private_key"]),
        ("stripe_backfill", &["api_key"]),
        ("gitlab_redelivery", &["token"]),
        ("paddle_replay", &["api_key"]),
        ("square_backfill", &["access_token"]),
    ];
    for (key, value) in table {
        public.push(key.clone());
        match (key.as_str(), value) {
            ("admin", toml::Value::Table(admin)) => {
                for (k, v) in admin {
                    public.push(k.clone());
                    all(
                        v,
                        if k == "token" {
                            &mut *secret
                        } else {
                            &mut *public
                        },
                    );
                }
            }
            ("sources", v) => {
                let sources: Vec<&toml::Table> = match v {
                    toml::Value::Array(a) => a.iter().filter_map(toml::Value::as_table).collect(),
                    toml::Value::Table(t) => vec![t],
                    _ => Vec::new(),
                };
                if let toml::Value::Array(a) = v {
                    a.iter()
                        .filter(|v| !v.is_table())
                        .for_each(|v| all(v, public));
                }
                for src in sources {
                    for (k, v) in src {
                        public.push(k.clone());
                        let sub = secret_keys.iter().find(|(t, _)| t == k);
                        match (k.as_str(), v, sub) {
                            ("secrets", v, _) => all(v, secret),
                            (_, toml::Value::Table(t), Some((_, keys))) => {
                                for (k2, v2) in t {
                                    public.push(k2.clone());
                                    if keys.contains(&k2.as_str()) {
                                        all(v2, secret);
                                    } else if k == "deliver"
                                        && k2 == "url"
                                        && let toml::Value::String(u) = v2
                                    {
                                        url_password(u, secret, public);
                                    } else {
                                        all(v2, public);
                                    }
                                }
                            }
                            (_, v, _) => all(v, public),
                        }
                    }
                }
            }
            (_, v) => all(v, public),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    setup();
    // Keep `file:` to the prepared file (`cred:` names are plain file
    // names in the prepared directory).
    if let Ok(mut raw) = toml::from_str::<RawConfig>(text) {
        let allowed = |r: &str| !r.starts_with("file:") || r == format!("file:{DIR}/secret");
        if !raw.secrets_mut().iter().all(|r| allowed(r)) {
            return;
        }
    }
    let result = hookbox::config::from_toml(
        text,
        "fuzz.toml".into(),
        &hookbox::ingress::receive::registry::PROVIDERS,
    );
    let printed = output(&result);

    if let Ok(config) = &result {
        let mut other = config.clone();
        // A literal destination URL is shown by its scheme, host and port:
        // everything else of it is replaced.
        let urls: Vec<Option<String>> = other
            .raw
            .sources
            .iter()
            .flat_map(|s| s.deliver.iter())
            .map(|d| {
                let url = d.url.as_deref()?;
                let mut u = url::Url::parse(url).ok()?;
                if is_reference(url) || u.host_str().is_none_or(str::is_empty) {
                    return None;
                }
                let _ = u.set_username("replaced-user");
                let _ = u.set_password(Some("replaced-password"));
                u.set_path(if u.path() == "/" || u.path().is_empty() { "/" } else { "/replaced" });
                if u.query().is_some() {
                    u.set_query(Some("replaced"));
                }
                if u.fragment().is_some() {
                    u.set_fragment(Some("replaced"));
                }
                Some(u.to_string())
            })
            .collect();
        for r in other.raw.secrets_mut() {
            if !is_reference(r) {
                *r = REPLACED.to_owned();
            }
        }
        let delivers = other.raw.sources.iter_mut().flat_map(|s| s.deliver.iter_mut());
        for (deliver, url) in delivers.zip(urls) {
            if url.is_some() {
                deliver.url = url;
            }
        }
        assert_eq!(
            config.redacted_toml(),
            other.redacted_toml(),
            "the redacted config depends on a literal secret"
        );
    }

    if let Ok(table) = toml::from_str::<toml::Table>(text) {
        let (mut secret, mut public) = (Vec::new(), Vec::new());
        split_strings(&table, &mut secret, &mut public);
        for s in secret {
            if s.chars().count() < 8 || is_reference(&s) || public.iter().any(|p| p.contains(&s)) {
                continue;
            }
            assert!(
                !printed.contains(&s),
                "`hookbox check` shows the secret {s:?}:\n{printed}"
            );
        }
    }
});
