//! The kernel's OOM kills in a cgroup: `oom_kill` of v1's memory.oom_control or v2's
//! memory.events.

use std::path::Path;

use super::remove::HOST_ROOT;

/// Whether a memory.oom_control or memory.events text counts an OOM kill.
pub fn counts_a_kill(text: &str) -> bool {
    text.lines().any(|l| {
        l.strip_prefix("oom_kill ")
            .and_then(|n| n.trim().parse::<u64>().ok())
            .is_some_and(|n| n > 0)
    })
}

/// Whether either file counts a kill; absent files count none.
pub(crate) fn killed_in(files: &[&Path]) -> bool {
    files.iter().any(|f| {
        std::fs::read_to_string(f)
            .ok()
            .is_some_and(|s| counts_a_kill(&s))
    })
}

/// Whether the OOM killer acted in `cgroup` on the host, looked up in v1's memory
/// hierarchy and in the unified tree at /sys/fs/cgroup (for callers without a manager:
/// the pod worker's exit handling). Blocking.
pub fn killed_on_host(cgroup: &str) -> bool {
    let rel = cgroup.trim_start_matches('/');
    let root = Path::new(HOST_ROOT);
    killed_in(&[
        &root.join("memory").join(rel).join("memory.oom_control"),
        &root.join(rel).join("memory.events"),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kill_counts_and_zero_or_nothing_does_not() {
        assert!(counts_a_kill(
            "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"
        ));
        assert!(counts_a_kill(
            "low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\noom_group_kill 0\n"
        ));
        assert!(!counts_a_kill(
            "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"
        ));
        assert!(!counts_a_kill("oom 1\noom_group_kill 1\n"));
        assert!(!counts_a_kill(""));
        let dir = tempfile::tempdir().unwrap();
        let events = dir.path().join("memory.events");
        assert!(!killed_in(&[&events]), "an absent file counts none");
        std::fs::write(&events, "oom 1\noom_kill 1\n").unwrap();
        assert!(killed_in(&[&dir.path().join("gone"), &events]));
    }
}
