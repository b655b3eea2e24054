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

/// Why a driver or cgroup name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CgroupNameError {
    #[error("expected cgroupfs or systemd")]
    UnknownDriver,
    /// Systemd refuses such a slice name (`a--b.slice`, `-a.slice`), so would upstream's
    /// driver when it makes the unit.
    #[error("{0:?} is not a valid systemd slice name (empty component)")]
    EmptySliceComponent(String),
}

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

    pub(crate) fn parse(text: &str) -> Result<CgroupDriver, CgroupNameError> {
        match text {
            "cgroupfs" => Ok(CgroupDriver::Cgroupfs),
            "systemd" => Ok(CgroupDriver::Systemd),
            _ => Err(CgroupNameError::UnknownDriver),
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

    /// Reads cgroupRoot as upstream's container manager does, in the cgroupfs spelling
    /// whatever the driver (`ParseCgroupfsToCgroupName`): `/kubelet` is `["kubelet"]`, which
    /// the systemd driver then names `/kubelet.slice` (kind and kubeadm nodes run with
    /// `cgroupRoot: /kubelet` and the systemd driver). A component spelled as a slice stays
    /// as written, so `/a.slice` becomes `/a.slice.slice` under systemd, as upstream's does
    /// (`Config::warnings` says so).
    pub fn parse_cgroup_root(path: &str) -> CgroupName {
        CgroupName(
            path.split('/')
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect(),
        )
    }

    /// Reads a configured cgroup of the reserved resources (kubeReservedCgroup,
    /// systemReservedCgroup) as the driver's own cgroup manager reads a name: cgroupfs as
    /// a path, systemd as upstream's `ParseSystemdToCgroupName` (the last slice names its
    /// whole ancestry: `/a.slice/a-b_c.slice` and `a-b_c.slice` are both `["a", "b-c"]`; a
    /// name without the `.slice` suffix is read the same way, `/kubepods` as `["kubepods"]`).
    pub fn parse(driver: CgroupDriver, path: &str) -> Result<CgroupName, CgroupNameError> {
        match driver {
            CgroupDriver::Cgroupfs => Ok(CgroupName::parse_cgroup_root(path)),
            CgroupDriver::Systemd => {
                let Some(last) = path.split('/').rfind(|p| !p.is_empty()) else {
                    return Ok(CgroupName::default());
                };
                let unit = last.strip_suffix(".slice").unwrap_or(last);
                let parts: Vec<String> = unit.split('-').map(|p| p.replace('_', "-")).collect();
                if parts.iter().any(String::is_empty) {
                    return Err(CgroupNameError::EmptySliceComponent(last.to_string()));
                }
                Ok(CgroupName(parts))
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
        // Upstream's ParseSystemdToCgroupName reads a name without the suffix too.
        assert_eq!(
            CgroupName::parse(CgroupDriver::Systemd, "/kubepods").unwrap(),
            name(&["kubepods"])
        );
        assert!(CgroupName::parse(CgroupDriver::Systemd, "/a--b.slice").is_err());
        assert_eq!(
            CgroupName::parse(CgroupDriver::Systemd, "/").unwrap(),
            name(&[])
        );
    }

    /// kind and kubeadm: `cgroupRoot: /kubelet` with the systemd driver puts pods under
    /// `/kubelet.slice/kubelet-kubepods.slice`, as upstream's container manager does.
    #[test]
    fn the_cgroup_root_is_read_in_the_cgroupfs_spelling_for_either_driver() {
        let root = CgroupName::parse_cgroup_root("/kubelet");
        assert_eq!(root, name(&["kubelet"]));
        assert_eq!(
            root.child("kubepods")
                .child("burstable")
                .to_path(CgroupDriver::Systemd),
            "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice"
        );
        assert_eq!(
            root.child("kubepods").to_path(CgroupDriver::Cgroupfs),
            "/kubelet/kubepods"
        );
        // Nested, with a dash: upstream escapes it in the slice names.
        assert_eq!(
            CgroupName::parse_cgroup_root("/my-nodes/kubelet")
                .child("kubepods")
                .to_path(CgroupDriver::Systemd),
            "/my_nodes.slice/my_nodes-kubelet.slice/my_nodes-kubelet-kubepods.slice"
        );
        // A slice spelling is taken as a plain name, as upstream takes it.
        assert_eq!(
            CgroupName::parse_cgroup_root("/krs.slice").to_path(CgroupDriver::Systemd),
            "/krs.slice.slice"
        );
        assert_eq!(CgroupName::parse_cgroup_root("/"), name(&[]));
    }
}
