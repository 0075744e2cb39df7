//! Outside tools some tests need (Chromium, pebble, Python's
//! `standardwebhooks`, podman, debootstrap): `.ci/run` installs them all.
//! A test whose tool is missing prints one line naming it and how to get
//! it, and returns early; with `CI` set it fails instead, so CI never
//! passes by skipping.

use std::io::Write;
use std::path::Path;

/// Whether `tool` is here (`found`); if not, says so and how to get it
/// (`get`, e.g. `apt-get install -y pebble`), or panics under `CI`.
pub fn outside_tool(tool: &str, found: bool, get: &str) -> bool {
    if found {
        return true;
    }
    let line = format!("this test needs {tool}, missing here ({get}; .ci/run does it)");
    assert!(std::env::var_os("CI").is_none(), "CI is set but {line}");
    // Past libtest's capture, which would show the line only on failure.
    let _ = writeln!(std::io::stderr(), "skipping: {line}");
    false
}

/// Whether `program` is an executable file in a directory of `PATH`.
pub fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| {
        std::fs::metadata(Path::new(&dir).join(program))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// [`outside_tool`] for programs on `PATH`, all Debian packages.
pub fn debian_tools(programs: &[&str], packages: &str) -> bool {
    let missing: Vec<&str> = programs.iter().copied().filter(|p| !on_path(p)).collect();
    outside_tool(
        &missing.join(" and "),
        missing.is_empty(),
        &format!("apt-get install -y {packages}"),
    )
}
