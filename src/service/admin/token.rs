//! The admin bearer token: the configured one, or one hookbox generates.
//!
//! Without `admin.token`, the first start draws 32 bytes from the OS
//! random number generator and writes them, hex-encoded, to `admin-token`
//! next to the database. The file is created with mode 0600 under a
//! temporary name, synced and renamed into place, so it is never seen
//! half-written or readable by others. Later starts read it back. Only the
//! file's path is ever logged.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, ensure};

use crate::config::{AdminConfig, Secret};

/// The generated token's file name, in the database's directory.
pub const TOKEN_FILE: &str = "admin-token";

/// Random bytes in a generated token.
const TOKEN_BYTES: usize = 32;

/// Where the generated token of the database at `database` lives.
pub fn token_path(database: &Path) -> PathBuf {
    match database.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(TOKEN_FILE),
        _ => PathBuf::from(TOKEN_FILE),
    }
}

/// The token the admin listener requires: `admin.token` when set, else
/// the generated one (created on first use).
pub fn resolve(config: &AdminConfig, database: &Path) -> anyhow::Result<Secret> {
    if let Some(token) = &config.token {
        return Ok(token.clone());
    }
    let path = token_path(database);
    if let Some(token) = read(&path)? {
        tracing::info!(path = %path.display(), "admin token read from its file");
        return Ok(token);
    }
    let token = create(&path)?;
    tracing::info!(
        path = %path.display(),
        "generated an admin token; send it as `Authorization: Bearer <token>` (it is in this file)"
    );
    Ok(token)
}

/// The token in `path`, or `None` when there is no file.
fn read(path: &Path) -> anyhow::Result<Option<Secret>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(e).with_context(|| format!("reading the admin token {}", path.display()));
        }
    };
    let token = text.trim();
    ensure!(
        token.len() >= 16,
        "the admin token file {} is empty or too short; delete it to have a new one generated",
        path.display()
    );
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(path = %path.display(), "the admin token file is readable by others; chmod 600 it");
    }
    Ok(Some(Secret::new(token)))
}

/// Writes a new random token to `path` atomically, readable by the owner only.
fn create(path: &Path) -> anyhow::Result<Secret> {
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes)
        .map_err(|e| anyhow!("reading the OS random number generator: {e}"))?;
    let token = hex::encode(bytes);
    crate::support::private_file::write(path, format!("{token}\n").as_bytes())
        .with_context(|| format!("writing the admin token {}", path.display()))?;
    Ok(Secret::new(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_token_is_private_random_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("hookbox.db");
        let first = resolve(&AdminConfig::default(), &db).unwrap();
        let path = dir.path().join(TOKEN_FILE);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(first.expose().len(), 2 * TOKEN_BYTES);
        assert!(first.expose().bytes().all(|b| b.is_ascii_hexdigit()));
        let again = resolve(&AdminConfig::default(), &db).unwrap();
        assert_eq!(first.expose(), again.expose());
        // Nothing but the token is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [TOKEN_FILE]);
        let other = tempfile::tempdir().unwrap();
        let fresh = resolve(&AdminConfig::default(), &other.path().join("x.db")).unwrap();
        assert_ne!(first.expose(), fresh.expose());
    }

    #[test]
    fn a_configured_token_wins_and_writes_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let config = AdminConfig {
            token: Some(Secret::new("configured-token-value")),
        };
        let token = resolve(&config, &dir.path().join("hookbox.db")).unwrap();
        assert_eq!(token.expose(), "configured-token-value");
        assert!(!dir.path().join(TOKEN_FILE).exists());
    }

    #[test]
    fn an_empty_token_file_is_an_error_that_says_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(TOKEN_FILE), "\n").unwrap();
        let err = resolve(&AdminConfig::default(), &dir.path().join("hookbox.db")).unwrap_err();
        assert!(format!("{err:#}").contains("delete it"), "{err:#}");
    }

    #[test]
    fn a_database_in_the_working_directory_keeps_its_token_there() {
        assert_eq!(token_path(Path::new("hookbox.db")), Path::new(TOKEN_FILE));
        assert_eq!(
            token_path(Path::new("/var/lib/hookbox/hookbox.db")),
            Path::new("/var/lib/hookbox/admin-token")
        );
    }
}
