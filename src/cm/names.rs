//! Cgroup names as upstream's cgroup manager spells them for its two drivers.
//!
//! A name is a list of components (`["kubepods", "burstable", "pod<uid>"]`). The cgroupfs
//! driver joins them as a path (`/kubepods/burstable/pod<uid>`); the systemd driver makes a
//! slice per level, each named after all the levels above it with `-` between them and any
//! `-` inside a component turned into `_` (`/kubepods.slice/kubepods-burstable.slice/
//! kubepods-burstable-pod<uid with _>.slice`).
//!
//! Upstream's systemd driver asks systemd over D-Bus to create those slices as transient
//! units and lets systemd write their limits (CPUWeight, MemoryMax, TasksMax); containerd's
//! runc then puts each container in a `cri-containerd-<id>.scope`. This agent runs where PID 1
//! need not be systemd, so it writes the same directories and files through cgroupfs itself
//! and hands runc a plain path (`.../kubepods-burstable-pod<uid>.slice/<id>`).

use std::fmt;

/// Which naming the node uses (cgroupDriver).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupDriver {
    Cgroupfs,
    Systemd,
}

impl CgroupDriver {
    pub fn as_str(self) -> &'static str {
        match self {
            CgroupDriver::Cgroupfs => "cgroupfs",
            CgroupDriver::Systemd => "systemd",
        }
    }

    pub(crate) fn parse(text: &str) -> Result<CgroupDriver, String> {
        match text {
            "cgroupfs" => Ok(CgroupDriver::Cgroupfs),
            "systemd" => Ok(CgroupDriver::Systemd),
            _ => Err("expected cgroupfs or systemd".into()),
        }
    }
}

impl fmt::Display for CgroupDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A driver-neutral cgroup name: its components from the hierarchy's root.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CgroupName(pub Vec<String>);

impl CgroupName {
    /// `parent` with one more component.
    pub fn child(&self, component: &str) -> CgroupName {
        let mut parts = self.0.clone();
        parts.push(component.to_string());
        CgroupName(parts)
    }

    /// Reads a configured path (cgroupRoot, kubeReservedCgroup) in the driver's own
    /// spelling: `/a/b` for cgroupfs, `/a.slice/a-b.slice` for systemd.
    pub fn parse(driver: CgroupDriver, path: &str) -> Result<CgroupName, String> {
        let parts = path.split('/').filter(|p| !p.is_empty());
        match driver {
            CgroupDriver::Cgroupfs => Ok(CgroupName(parts.map(str::to_string).collect())),
            CgroupDriver::Systemd => {
                let mut out = Vec::new();
                for part in parts {
                    let Some(unit) = part.strip_suffix(".slice") else {
                        return Err(format!(
                            "{part:?} is not a systemd slice (expected NAME.slice)"
                        ));
                    };
                    // A slice's own name is the text after its parent's prefix.
                    let own = unit.rsplit('-').next().unwrap_or(unit);
                    out.push(own.replace('_', "-"));
                }
                Ok(CgroupName(out))
            }
        }
    }

    /// The path under a hierarchy's mount point, absolute, in the driver's spelling.
    pub fn to_path(&self, driver: CgroupDriver) -> String {
        match driver {
            CgroupDriver::Cgroupfs => format!("/{}", self.0.join("/")),
            CgroupDriver::Systemd => {
                let mut path = String::new();
                let mut prefix = String::new();
                for part in &self.0 {
                    if !prefix.is_empty() {
                        prefix.push('-');
                    }
                    prefix.push_str(&part.replace('-', "_"));
                    path.push('/');
                    path.push_str(&prefix);
                    path.push_str(".slice");
                }
                if path.is_empty() {
                    path.push('/');
                }
                path
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(parts: &[&str]) -> CgroupName {
        CgroupName(parts.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn cgroupfs_and_systemd_spellings_match_upstream() {
        let pod = name(&["kubepods", "burstable", "pod1a2b-3c"]);
        assert_eq!(
            pod.to_path(CgroupDriver::Cgroupfs),
            "/kubepods/burstable/pod1a2b-3c"
        );
        assert_eq!(
            pod.to_path(CgroupDriver::Systemd),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b_3c.slice"
        );
        assert_eq!(
            name(&["kubepods"]).to_path(CgroupDriver::Systemd),
            "/kubepods.slice"
        );
        assert_eq!(CgroupName::default().to_path(CgroupDriver::Systemd), "/");
        assert_eq!(CgroupName::default().to_path(CgroupDriver::Cgroupfs), "/");
    }

    #[test]
    fn configured_paths_parse_in_the_drivers_spelling() {
        assert_eq!(
            CgroupName::parse(CgroupDriver::Cgroupfs, "/a/b/").unwrap(),
            name(&["a", "b"])
        );
        assert_eq!(
            CgroupName::parse(CgroupDriver::Systemd, "/system.slice/system-kube_x.slice").unwrap(),
            name(&["system", "kube-x"])
        );
        let back = CgroupName::parse(
            CgroupDriver::Systemd,
            "/kubepods.slice/kubepods-besteffort.slice",
        )
        .unwrap();
        assert_eq!(back, name(&["kubepods", "besteffort"]));
        assert_eq!(
            back.to_path(CgroupDriver::Systemd),
            "/kubepods.slice/kubepods-besteffort.slice"
        );
        assert!(CgroupName::parse(CgroupDriver::Systemd, "/kubepods").is_err());
        assert_eq!(
            CgroupName::parse(CgroupDriver::Systemd, "/").unwrap(),
            name(&[])
        );
    }
}
