//! The Debian package's conffile, `debian/hookbox.toml`, as the admin
//! meets it: the postinst has created the credential files the unit names,
//! empty; the admin writes one secret and `hookbox check` passes.

use std::path::Path;
use std::process::Output;

use crate::helpers::hookbox;

const CONFFILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/debian/hookbox.toml");

/// `hookbox check` on `config` with `$CREDENTIALS_DIRECTORY` holding the
/// files the postinst creates, with these contents.
fn check(config: &Path, github: &str, stripe: &str) -> Output {
    let creds = tempfile::tempdir().unwrap();
    std::fs::write(creds.path().join("github-webhook-secret"), github).unwrap();
    std::fs::write(creds.path().join("stripe-webhook-secret"), stripe).unwrap();
    hookbox()
        .args(["check", "--config"])
        .arg(config)
        .env("CREDENTIALS_DIRECTORY", creds.path())
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_packaged_config_checks_once_the_github_secret_is_written() {
    let out = check(Path::new(CONFFILE), "a-github-secret\n", "");
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("cred:github-webhook-secret"), "{stdout}");
    assert!(stdout.contains("listen = \"0.0.0.0:8080\""), "{stdout}");
    assert!(!text(&out).contains("a-github-secret"), "the secret leaked");
}

#[test]
fn the_packaged_config_names_the_credential_file_still_empty() {
    let out = check(Path::new(CONFFILE), "", "");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("credential github-webhook-secret is empty")
            && stderr.contains("/etc/hookbox/credentials/github-webhook-secret"),
        "{stderr}"
    );
}

#[test]
fn the_packaged_configs_commented_stripe_source_works_once_uncommented() {
    let shipped = std::fs::read_to_string(CONFFILE).unwrap();
    let block = "# [[sources]]\n# name = \"stripe\"\n# kind = \"stripe\"\n# secrets = [\"cred:stripe-webhook-secret\"]\n";
    assert!(
        shipped.contains(block),
        "no commented Stripe source in the conffile"
    );
    let dir = tempfile::tempdir().unwrap();
    let edited = dir.path().join("hookbox.toml");
    std::fs::write(&edited, shipped.replace(block, &block.replace("# ", ""))).unwrap();

    let out = check(&edited, "a-github-secret", "");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("credential stripe-webhook-secret is empty"),
        "{}",
        text(&out)
    );
    let out = check(
        &edited,
        "a-github-secret",
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("cred:stripe-webhook-secret"),
        "{}",
        text(&out)
    );
}
