//! `hookbox man` and `hookbox completions`: the pages cover every command
//! and flag the binary has, and the copies in `dist/` that the Debian
//! package ships are exactly what the binary prints today.

use std::path::{Path, PathBuf};

use crate::helpers::hookbox;

const REFRESH: &str = "run dist/refresh.sh and commit dist/";

fn dist(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("dist")
        .join(path)
}

fn stdout_of(args: &[&str]) -> String {
    let out = hookbox().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "hookbox {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The commands `hookbox --help` lists, read from the binary rather than
/// from a list kept here, so a new command is checked without editing this.
fn commands() -> Vec<String> {
    let help = stdout_of(&["--help"]);
    let names: Vec<String> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect();
    assert!(names.len() >= 10, "too few commands parsed from:\n{help}");
    names
}

/// Every `--flag` a command's `--help` shows.
fn long_flags(command: &str) -> Vec<String> {
    let help = stdout_of(&[command, "--help"]);
    let mut flags: Vec<String> = help
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(str::to_owned)
        .collect();
    flags.sort();
    flags.dedup();
    flags
}

/// How roff writes a literal hyphen.
fn roff(text: &str) -> String {
    text.replace('-', "\\-")
}

#[test]
fn the_man_page_names_every_command_and_each_command_page_every_flag() {
    let main_page = stdout_of(&["man"]);
    let dir = tempfile::tempdir().unwrap();
    stdout_of(&["man", "--out-dir", dir.path().to_str().unwrap()]);
    for command in commands() {
        let reference = roff(&format!("hookbox-{command}(1)"));
        assert!(
            main_page.contains(&reference),
            "hookbox.1 does not mention {reference}"
        );
        let page = std::fs::read_to_string(dir.path().join(format!("hookbox-{command}.1")))
            .unwrap_or_else(|e| panic!("no page for {command}: {e}"));
        for flag in long_flags(&command) {
            assert!(
                page.contains(&roff(&flag)),
                "hookbox-{command}.1 does not document {flag}"
            );
        }
    }
}

#[test]
fn the_packaged_man_pages_and_completions_are_what_the_binary_prints() {
    let dir = tempfile::tempdir().unwrap();
    stdout_of(&["man", "--out-dir", dir.path().to_str().unwrap()]);
    let names = |d: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".1"))
            .collect();
        names.sort();
        names
    };
    let fresh = names(dir.path());
    assert_eq!(fresh, names(&dist("man")), "dist/man is stale: {REFRESH}");
    for name in &fresh {
        let want = std::fs::read_to_string(dir.path().join(name)).unwrap();
        let shipped = std::fs::read_to_string(dist("man").join(name)).unwrap();
        assert!(want == shipped, "dist/man/{name} is stale: {REFRESH}");
    }
    for (shell, file) in [
        ("bash", "hookbox.bash"),
        ("zsh", "_hookbox"),
        ("fish", "hookbox.fish"),
    ] {
        let shipped = std::fs::read_to_string(dist("completions").join(file)).unwrap();
        assert!(
            stdout_of(&["completions", shell]) == shipped,
            "dist/completions/{file} is stale: {REFRESH}"
        );
    }
}

#[test]
fn the_bash_completion_loads_and_completes_commands_and_flags() {
    let script = dist("completions/hookbox.bash");
    // What bash-completion does on <TAB>: set COMP_WORDS/COMP_CWORD, call
    // the function `complete -p` names, read COMPREPLY.
    let complete = |words: &str| -> String {
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "source {script:?} && fn=$(complete -p hookbox | sed -E 's/.*-F ([^ ]+).*/\\1/') \
                 && COMP_WORDS=({words}) && COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)) \
                 && COMP_LINE=\"{words}\" && COMP_POINT=${{#COMP_LINE}} \
                 && \"$fn\" hookbox \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\" \
                 && printf '%s\\n' \"${{COMPREPLY[@]}}\""
            ))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let top = complete("hookbox ''");
    for command in commands() {
        assert!(top.lines().any(|l| l == command), "no {command} in:\n{top}");
    }
    let replay = complete("hookbox replay --de");
    assert!(
        replay.lines().any(|l| l == "--dead") && replay.lines().any(|l| l == "--destination"),
        "{replay}"
    );
}
