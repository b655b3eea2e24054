//! The cgroups a test's containers lived in, removed after the test. runc removes only a
//! container's own (leaf) cgroup when its task is deleted, so what sits above it stays
//! unless someone takes it: the pod level (`/kubepods/<qos>/pod<uid>`) when the agent was
//! killed or never got to remove its pods, and `/<namespace>` for containers made with
//! `ctr run` (containerd's default cgroupsPath is `/<namespace>/<id>`).
//!
//! Removal is rmdir only, leaves first: the kernel refuses to remove a cgroup that still
//! has processes or children, so a cgroup another live test uses is never taken.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Mount points of every cgroup hierarchy: one per v1 controller (and named hierarchies
/// such as name=systemd) plus the cgroup2 tree, wherever each is mounted.
pub fn hierarchies() -> Vec<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, mount, fstype) = (f.next()?, f.next()?, f.next()?);
            matches!(fstype, "cgroup" | "cgroup2").then(|| PathBuf::from(mount))
        })
        .collect()
}

/// Where the cgroup `rel` (absolute within its hierarchy, e.g. `/kubepods/pod<uid>`) exists.
pub fn existing(rel: &str) -> Vec<PathBuf> {
    let rel = rel.trim_start_matches('/');
    if rel.is_empty() {
        return Vec::new();
    }
    hierarchies()
        .into_iter()
        .map(|h| h.join(rel))
        .filter(|p| p.is_dir())
        .collect()
}

/// Removes the cgroup `rel` and everything under it in every hierarchy, leaves first.
/// Processes of a task that was just killed can take a moment to leave their cgroup, so a
/// busy cgroup is retried for a while; returns what still exists after that.
pub fn remove_tree(rel: &str) -> Vec<PathBuf> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for dir in existing(rel) {
            rmdir_leaves_first(&dir);
        }
        let left = existing(rel);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn rmdir_leaves_first(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            // Sub-cgroups are the only directories in a cgroup folder; the rest are its
            // control files, which go with the rmdir.
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                rmdir_leaves_first(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// The cgroups to remove once a container with this cgroupsPath is gone: its own, and its
/// parent when that is the pod's (`pod<uid>`) or the namespace's (`/<ns>`, from `ctr run`).
/// Never the shared QoS levels (`/kubepods`, `/kubepods/burstable`, ...): other tests'
/// agents place their pods there.
pub fn owned_by_container(cgroups_path: &str, ns: &str) -> Vec<String> {
    // Only cgroupfs-style paths; a systemd "slice:prefix:name" is not ours to walk.
    if !cgroups_path.starts_with('/') {
        return Vec::new();
    }
    let mut owned = vec![cgroups_path.to_string()];
    if let Some((parent, _)) = cgroups_path.rsplit_once('/') {
        let last = parent.rsplit('/').next().unwrap_or_default();
        if last.starts_with("pod") || (parent == format!("/{ns}") && is_test_namespace(ns)) {
            owned.push(parent.to_string());
        }
    }
    owned
}

/// The pod-level cgroup of a pod in each QoS class (the class is not needed to find it).
pub fn pod_cgroups(uid: &str) -> [String; 3] {
    [
        format!("/kubepods/pod{uid}"),
        format!("/kubepods/burstable/pod{uid}"),
        format!("/kubepods/besteffort/pod{uid}"),
    ]
}

/// Namespaces the tests own (krs-...): their `/<ns>` cgroup is theirs to remove. The agent's
/// default namespace, used by hack scripts and people, is not.
pub fn is_test_namespace(ns: &str) -> bool {
    ns.starts_with("krs-")
}
