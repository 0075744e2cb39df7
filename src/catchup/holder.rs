//! Who holds a job lock: `<pid>@<pid namespace>:<random>`.
//!
//! The pid and namespace let a later pass tell that the holder's process
//! is gone ([`is_dead`]); the random part tells two passes of one process
//! apart. A holder from another PID namespace (a CLI in another container
//! sharing the database) is never judged dead: its pid means nothing
//! here, so its lock runs out by itself.

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

/// This process's PID namespace, as `/proc/self/ns/pid` names it
/// (`pid:[4026531836]`), or `?` where there is no such file.
fn namespace() -> String {
    std::fs::read_link("/proc/self/ns/pid")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "?".to_owned())
}

/// A fresh holder name for one pass of this process.
pub fn new() -> String {
    format!(
        "{}@{}:{:016x}",
        std::process::id(),
        namespace(),
        fastrand::u64(..)
    )
}

/// Whether `holder` names a process of this namespace that has exited.
pub fn is_dead(holder: &str) -> bool {
    let Some((pid, rest)) = holder.split_once('@') else {
        return false;
    };
    let Some((ns, _)) = rest.rsplit_once(':') else {
        return false;
    };
    let own = namespace();
    if ns != own || own == "?" {
        return false;
    }
    let Ok(pid) = pid.parse::<i32>() else {
        return false;
    };
    pid > 0
        && pid != std::process::id() as i32
        && kill(Pid::from_raw(pid), None) == Err(Errno::ESRCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_is_dead_only_when_its_process_in_this_namespace_is_gone() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let ns = namespace();
        assert!(is_dead(&format!("{gone}@{ns}:0123")));
        // Alive: this process, and pid 1.
        assert!(!is_dead(&new()));
        assert!(!is_dead(&format!("1@{ns}:0123")));
        // Another namespace, the old format, or nonsense: never judged.
        assert!(!is_dead(&format!("{gone}@pid:[1]:0123")));
        assert!(!is_dead(&format!("{gone}:0123")));
        assert!(!is_dead("x@y:z"));
    }
}
