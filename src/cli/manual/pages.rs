//! Man pages and shell completions, generated from the CLI's clap
//! definitions so they cannot drift from the real flags.
//!
//! [`crate::cli::args`] owns the definitions; `cli::manual` hands their
//! `clap::Command` here for `hookbox man` and `hookbox completions SHELL`.
//! The Debian package ships copies of this output kept in `dist/`
//! (cargo-deb packages files, it does not run the binary);
//! `tests/it/manual.rs` fails when those copies differ from what the
//! binary prints, and names the command that refreshes them.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// Shells `hookbox completions` writes a script for.
pub use clap_complete::Shell;

/// What the generated pages say besides the flags: where things live under
/// the package and the unit, which clap has no field for.
const FILES_AND_SEE_ALSO: &str = r#".SH FILES
.TP
\fI/etc/hookbox/hookbox.toml\fR
The config file every command reads when neither \fB\-\-config\fR nor \fBHOOKBOX_CONFIG\fR names one.
.TP
\fI/etc/hookbox/credentials/\fR
Secrets the systemd unit passes to hookbox with \fBLoadCredential=\fR; the config refers to them as \fBcred:NAME\fR.
.TP
\fI/var/lib/hookbox/\fR
The service's state: the database (\fIhookbox.db\fR), the admin token and backups.
.SH SEE ALSO
\fBsystemctl\fR(1), \fBsystemd.exec\fR(5), \fI/usr/share/doc/hookbox/README.md\fR for an overview, and \fI/usr/share/doc/hookbox/configuration-reference.md\fR for every key of the configuration; the full manual is the book in the source's \fIdocs/\fR directory.
"#;

/// The version the pages carry: the package's own, without the git commit
/// that `--version` adds, so regenerating them on another commit changes
/// nothing.
fn for_pages(cmd: clap::Command) -> clap::Command {
    cmd.version(env!("CARGO_PKG_VERSION"))
        .disable_help_subcommand(true)
}

/// The top page, `hookbox.1`: synopsis, global options, the list of
/// commands (each refers to its own page, `hookbox-NAME(1)`), files.
pub fn write_main_page(cmd: clap::Command, out: &mut dyn Write) -> anyhow::Result<()> {
    clap_mangen::Man::new(for_pages(cmd))
        .render(out)
        .context("rendering the man page")?;
    out.write_all(FILES_AND_SEE_ALSO.as_bytes())
        .context("writing the man page")
}

/// Writes `hookbox.1` and one `hookbox-NAME.1` per command into `dir`, and
/// returns the paths written, in order.
pub fn write_pages(cmd: clap::Command, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut cmd = for_pages(cmd);
    cmd.build();
    let mut written = Vec::new();
    let main = dir.join(format!("{}.1", cmd.get_name()));
    write_page_file(&main, |out| write_main_page(cmd.clone(), out))?;
    written.push(main);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let man = clap_mangen::Man::new(sub.clone());
        let path = dir.join(man.get_filename());
        write_page_file(&path, |out| {
            man.render(out).context("rendering the man page")
        })?;
        written.push(path);
    }
    Ok(written)
}

fn write_page_file(
    path: &Path,
    render: impl FnOnce(&mut dyn Write) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut buf = Vec::new();
    render(&mut buf)?;
    std::fs::write(path, buf).with_context(|| format!("writing {}", path.display()))
}

/// The completion script for `shell`.
pub fn write_completions(
    cmd: clap::Command,
    shell: Shell,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let mut cmd = for_pages(cmd);
    let name = cmd.get_name().to_owned();
    // clap_complete writes straight to `out` and panics on a write error;
    // render into memory so a closed pipe is an error, not a panic.
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut buf);
    out.write_all(&buf).context("writing the completion script")
}
