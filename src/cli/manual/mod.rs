//! `hookbox man` and `hookbox completions`: the CLI documenting itself
//! from its own clap definitions ([`super::args`]), so the pages cannot
//! drift from the flags. The generating is [`pages`]'s.

use std::path::Path;
use std::process::ExitCode;

use clap::CommandFactory as _;

use super::{Cli, report};

pub mod pages;

/// The main page on stdout, or every page written into `out_dir`.
pub fn man(out_dir: Option<&Path>) -> ExitCode {
    report("man", write_man(out_dir))
}

fn write_man(out_dir: Option<&Path>) -> anyhow::Result<()> {
    match out_dir {
        None => crate::cli::manual::pages::write_main_page(
            Cli::command(),
            &mut std::io::stdout().lock(),
        ),
        Some(dir) => {
            for path in crate::cli::manual::pages::write_pages(Cli::command(), dir)? {
                println!("wrote {}", path.display());
            }
            Ok(())
        }
    }
}

/// The completion script for `shell` on stdout.
pub fn completions(shell: crate::cli::manual::pages::Shell) -> ExitCode {
    let out = &mut std::io::stdout().lock();
    report(
        "completions",
        crate::cli::manual::pages::write_completions(Cli::command(), shell, out),
    )
}
