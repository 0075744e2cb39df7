#!/usr/bin/env bash
# dist/refresh.sh: regenerates the man pages and completion scripts the
# Debian package ships (Cargo.toml, [package.metadata.deb] assets) from the
# CLI's clap definitions, with the binary's own `man` and `completions`
# verbs. cargo-deb packages files and does not run the binary, hence these
# checked-in copies; tests/it/manual.rs fails when they differ from what
# the binary prints, so run this after changing a flag or a doc comment:
#
#   dist/refresh.sh           # from anywhere in the project
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --locked --bin hookbox
bin=target/debug/hookbox
rm -f dist/man/*.1
mkdir -p dist/man dist/completions
"$bin" man --out-dir dist/man >/dev/null
"$bin" completions bash >dist/completions/hookbox.bash
"$bin" completions zsh >dist/completions/_hookbox
"$bin" completions fish >dist/completions/hookbox.fish
git status --short -- dist
