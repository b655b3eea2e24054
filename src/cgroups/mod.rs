//! The cgroups layer (the "OS" layer of issue 37): everything that reads or writes the
//! cgroup filesystem, and nothing about pods. Above it, `cm` decides the kubelet's policy
//! (QoS tiers, pod cgroup names, node allocatable, swap) and `stats` samples on a timer;
//! both go through this module. It imports nothing from the crate.
//!
//! - `hierarchy`: where the v1 controllers or the v2 tree are mounted, found once from the
//!   mount table (`mounts`); hybrid hosts (v1 controllers plus a cgroup2 mount) are v1.
//! - `manager`: the one `Manager` trait (create, apply limits, stats, OOM kills, pressure,
//!   remove) with the cgroupfs `v1` and `v2` implementations, picked once by `detect`; the
//!   systemd driver is the slot documented there.
//! - `convert`: every conversion (shares, quota, weight, the kernel's "no limit"
//!   spellings), written once and tested at its edges.
//! - `stats`, `detail`, `pressure`: the readers of usage, cAdvisor's extra counters and
//!   PSI (`files`: the file formats). Files are read directly: cgroups-rs misreads v2 and
//!   turns missing files into zeros.
//! - `remove`, `oom`: removing a cgroup from every hierarchy; the kernel's OOM kills.

mod cgroupfs;
pub mod convert;
pub mod detail;
mod error;
pub mod files;
mod hierarchy;
mod manager;
pub mod mounts;
pub mod oom;
pub mod pressure;
pub mod remove;
pub mod stats;
mod v1;
mod v2;

pub use convert::{
    milli_cpu_to_quota, milli_cpu_to_shares, shares_to_weight, MAX_SHARES, MIN_SHARES, QUOTA_PERIOD,
};
pub use error::CgroupError;
pub use hierarchy::{Cgroups, V1Mount, V1Mounts};
pub use manager::{detect, manager_for, Manager, ResourceConfig};
pub use stats::{CgroupSample, MemorySample, PidsSample, ProcessCgroup};
pub use v1::CgroupfsV1;
pub use v2::CgroupfsV2;

/// The cgroup version of the host's hierarchies. A hybrid host (v1 controllers plus a
/// controller-less cgroup2 mount) is V1, as runc and the upstream kubelet treat it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    /// `v1` or `v2`, as logs spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        }
    }
}

/// The captured kernel fixtures (src/stats/testdata: the v2 tree is from a real 6.1 node).
#[cfg(test)]
pub(crate) fn testdata(rel: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/stats/testdata")
        .join(rel)
}

/// The layer's rule, checked on its source: the cgroups module and the vocabulary leaf
/// import nothing from the crate but the vocabulary (and themselves).
#[cfg(test)]
mod layering {
    fn crate_imports(folder: &str, allowed: &[&str]) -> Vec<String> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(folder);
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            for (n, line) in text.lines().enumerate() {
                for (at, _) in line.match_indices("crate::") {
                    let rest = &line[at + "crate::".len()..];
                    let module: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    // Not a path (this test's own strings), or the tests' shared helpers.
                    if module.is_empty() || module == "test_support" {
                        continue;
                    }
                    if !allowed.contains(&module.as_str()) {
                        found.push(format!("{}:{}: {line}", entry.path().display(), n + 1));
                    }
                }
            }
        }
        found
    }

    #[test]
    fn cgroups_and_vocabulary_import_only_the_vocabulary() {
        let cgroups = crate_imports("src/cgroups", &["cgroups", "vocabulary"]);
        assert!(cgroups.is_empty(), "{cgroups:#?}");
        let vocabulary = crate_imports("src/vocabulary", &["vocabulary"]);
        assert!(vocabulary.is_empty(), "{vocabulary:#?}");
    }
}
