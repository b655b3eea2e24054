//! Where the host's cgroup hierarchies are, found once from the mount table.
//!
//! cgroup2 mounted at /sys/fs/cgroup is a unified host (v2). Otherwise the v1 controllers'
//! mounts are used, so a hybrid host (v1 controllers plus a controller-less cgroup2 tree at
//! /sys/fs/cgroup/unified) counts as v1, as runc and the upstream kubelet treat it. v1 needs
//! the memory hierarchy and a cpu or cpuacct one; without them, any cgroup2 mount is the
//! only choice left.

use std::path::{Path, PathBuf};

use super::error::{CgroupError, Result};
use super::files::{parse_proc_cgroup, read_string};
use super::mounts::{
    any_unified, parse_mountinfo, unified_at_sys_fs_cgroup, v1_hierarchy, MountEntry,
};
use super::stats::ProcessCgroup;
use super::Version;

/// Where one v1 controller's hierarchy is mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V1Mount {
    pub mount_point: PathBuf,
    /// The hierarchy path that the mount point shows (`/` on a host).
    pub root: String,
}

impl V1Mount {
    /// The directory of `cgroup` in this hierarchy.
    pub fn dir(&self, cgroup: &str) -> PathBuf {
        let rel = if self.root != "/" {
            cgroup.strip_prefix(self.root.as_str()).unwrap_or(cgroup)
        } else {
            cgroup
        };
        self.mount_point.join(rel.trim_start_matches('/'))
    }
}

/// The v1 hierarchies the agent writes or reads. At least one of `cpu` and `cpuacct` is
/// there (they are one mount on most hosts, two on this project's hybrid test host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V1Mounts {
    pub cpu: Option<V1Mount>,
    pub cpuacct: Option<V1Mount>,
    pub memory: V1Mount,
    pub pids: Option<V1Mount>,
    pub blkio: Option<V1Mount>,
}

impl V1Mounts {
    /// The cpu controller's hierarchy (shares, quota), else cpuacct's.
    pub(crate) fn cpu_or_cpuacct(&self) -> &V1Mount {
        self.cpu
            .as_ref()
            .or(self.cpuacct.as_ref())
            .unwrap_or(&self.memory)
    }

    /// The cpuacct hierarchy (usage), else cpu's.
    pub(crate) fn cpuacct_or_cpu(&self) -> &V1Mount {
        self.cpuacct
            .as_ref()
            .or(self.cpu.as_ref())
            .unwrap_or(&self.memory)
    }
}

// One per agent, held in a `Cgroups` that is cloned rarely: the v1 variant's size is no cost.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Layout {
    V1(V1Mounts),
    V2 { root: PathBuf },
}

/// The host's cgroup hierarchies. Cheap to clone; holds only paths. The reading of cgroup
/// files (`stats`, `detail`, `pressure`) is written on it; the writing is the managers'.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroups {
    pub(crate) layout: Layout,
}

impl Cgroups {
    /// Detects the layout from /proc/self/mountinfo.
    pub fn detect() -> Result<Self> {
        Self::detect_from(Path::new("/proc/self/mountinfo"))
    }

    pub fn detect_from(mountinfo: &Path) -> Result<Self> {
        let text = read_string(mountinfo)?;
        Self::from_mounts(mountinfo, &parse_mountinfo(mountinfo, &text)?)
    }

    /// The stats collector required cpuacct and the container manager cpu; either now
    /// makes a v1 host (the other falls back to it), which changes nothing on a host that
    /// mounts both, as every v1 kernel with CFS does.
    pub fn from_mounts(mountinfo: &Path, mounts: &[MountEntry]) -> Result<Self> {
        if let Some(m) = unified_at_sys_fs_cgroup(mounts) {
            return Ok(Cgroups::v2_at(&m.mount_point));
        }
        let v1 = |controller: &str| {
            v1_hierarchy(mounts, controller).map(|m| V1Mount {
                mount_point: PathBuf::from(&m.mount_point),
                root: m.root.clone(),
            })
        };
        let missing = |controller| CgroupError::NoHierarchy {
            mountinfo: mountinfo.to_path_buf(),
            controller,
        };
        let (cpu, cpuacct) = (v1("cpu"), v1("cpuacct"));
        match v1("memory") {
            Some(memory) if cpu.is_some() || cpuacct.is_some() => Ok(Cgroups {
                layout: Layout::V1(V1Mounts {
                    cpu,
                    cpuacct,
                    memory,
                    pids: v1("pids"),
                    blkio: v1("blkio"),
                }),
            }),
            memory => {
                // No usable v1 hierarchy: a cgroup2 mount elsewhere is the only choice left.
                if let Some(m) = any_unified(mounts) {
                    return Ok(Cgroups::v2_at(&m.mount_point));
                }
                Err(missing(if memory.is_none() { "memory" } else { "cpu" }))
            }
        }
    }

    /// A unified hierarchy rooted at `root` (tests pass a fixture tree).
    pub fn v2_at(root: impl AsRef<Path>) -> Self {
        Cgroups {
            layout: Layout::V2 {
                root: root.as_ref().to_path_buf(),
            },
        }
    }

    /// v1 hierarchies at `root/{cpu,cpuacct,memory,pids,blkio}` (tests pass a fixture tree).
    pub fn v1_at(root: impl AsRef<Path>) -> Self {
        let m = |c: &str| V1Mount {
            mount_point: root.as_ref().join(c),
            root: "/".into(),
        };
        Cgroups {
            layout: Layout::V1(V1Mounts {
                cpu: Some(m("cpu")),
                cpuacct: Some(m("cpuacct")),
                memory: m("memory"),
                pids: Some(m("pids")),
                blkio: Some(m("blkio")),
            }),
        }
    }

    pub fn version(&self) -> Version {
        match self.layout {
            Layout::V1(_) => Version::V1,
            Layout::V2 { .. } => Version::V2,
        }
    }

    fn unified(root: &Path, cgroup: &str) -> PathBuf {
        root.join(cgroup.trim_start_matches('/'))
    }

    /// The directory holding the memory files of `cgroup` (the unified dir on v2).
    pub fn memory_dir(&self, cgroup: &str) -> PathBuf {
        match &self.layout {
            Layout::V1(m) => m.memory.dir(cgroup),
            Layout::V2 { root } => Self::unified(root, cgroup),
        }
    }

    /// The directory holding the cpu usage of `cgroup` (v1 cpuacct).
    pub fn cpu_dir(&self, cgroup: &str) -> PathBuf {
        match &self.layout {
            Layout::V1(m) => m.cpuacct_or_cpu().dir(cgroup),
            Layout::V2 { root } => Self::unified(root, cgroup),
        }
    }

    pub(crate) fn pids_dir(&self, cgroup: &str) -> Option<PathBuf> {
        match &self.layout {
            Layout::V1(m) => m.pids.as_ref().map(|p| p.dir(cgroup)),
            Layout::V2 { root } => Some(Self::unified(root, cgroup)),
        }
    }

    /// The cpu controller's directory (quota, period, shares, throttling): the v1 `cpu`
    /// hierarchy, or the unified dir. None on a v1 host without a cpu hierarchy.
    pub(crate) fn cpu_controller_dir(&self, cgroup: &str) -> Option<PathBuf> {
        match &self.layout {
            Layout::V1(m) => m.cpu.as_ref().map(|c| c.dir(cgroup)),
            Layout::V2 { root } => Some(Self::unified(root, cgroup)),
        }
    }

    /// The block I/O controller's directory (v1 `blkio`, or the unified dir's `io.stat`).
    pub(crate) fn io_dir(&self, cgroup: &str) -> Option<PathBuf> {
        match &self.layout {
            Layout::V1(m) => m.blkio.as_ref().map(|b| b.dir(cgroup)),
            Layout::V2 { root } => Some(Self::unified(root, cgroup)),
        }
    }

    /// The folder holding every hierarchy's mount (`/sys/fs/cgroup`), or the v2 root.
    pub(crate) fn mount_parent(&self) -> PathBuf {
        match &self.layout {
            Layout::V1(m) => {
                let memory = &m.memory.mount_point;
                memory
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| memory.clone())
            }
            Layout::V2 { root } => root.clone(),
        }
    }

    /// A process's cgroups from the text of /proc/<pid>/cgroup.
    pub fn process_cgroup(&self, proc_cgroup_text: &str) -> Option<ProcessCgroup> {
        // An unreadable file names no cgroup; the caller treats that as "not found".
        let lines = parse_proc_cgroup(Path::new("/proc/<pid>/cgroup"), proc_cgroup_text).ok()?;
        match self.layout {
            Layout::V2 { .. } => lines
                .iter()
                .find(|l| l.controllers.is_empty())
                .map(|l| ProcessCgroup::same(&l.path)),
            Layout::V1(_) => {
                let by = |c: &str| {
                    lines
                        .iter()
                        .find(|l| l.controllers.iter().any(|x| x == c))
                        .map(|l| l.path.clone())
                };
                let memory = by("memory")?;
                Some(ProcessCgroup {
                    cpu: by("cpuacct").unwrap_or_else(|| memory.clone()),
                    pids: by("pids").unwrap_or_else(|| memory.clone()),
                    memory,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::testdata;

    #[test]
    fn detects_hybrid_as_v1_with_separate_cpu_and_cpuacct() {
        let c = Cgroups::detect_from(&testdata("proc/mountinfo.hybrid")).unwrap();
        assert_eq!(c.version(), Version::V1);
        assert_eq!(
            c.cpu_dir("/kubepods"),
            PathBuf::from("/sys/fs/cgroup/cpuacct/kubepods")
        );
        assert_eq!(
            c.cpu_controller_dir("/kubepods"),
            Some(PathBuf::from("/sys/fs/cgroup/cpu/kubepods"))
        );
        assert_eq!(
            c.memory_dir("/kubepods"),
            PathBuf::from("/sys/fs/cgroup/memory/kubepods")
        );
        assert_eq!(c.mount_parent(), PathBuf::from("/sys/fs/cgroup"));
    }

    #[test]
    fn detects_comounted_v1_and_unified() {
        let c = Cgroups::detect_from(&testdata("proc/mountinfo.v1-comounted")).unwrap();
        assert_eq!(c.version(), Version::V1);
        assert_eq!(
            c.cpu_dir("/a"),
            PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/a")
        );
        let c = Cgroups::detect_from(&testdata("proc/mountinfo.unified")).unwrap();
        assert_eq!(c.version(), Version::V2);
        assert_eq!(
            c.memory_dir("/kubepods"),
            PathBuf::from("/sys/fs/cgroup/kubepods")
        );
    }

    #[test]
    fn no_hierarchy_names_the_file() {
        let err = Cgroups::from_mounts(Path::new("/proc/self/mountinfo"), &[]).unwrap_err();
        assert!(err.to_string().contains("/proc/self/mountinfo"), "{err}");
    }

    fn entry(point: &str, fs_type: &str, opts: &[&str]) -> MountEntry {
        MountEntry {
            root: "/".into(),
            mount_point: point.into(),
            fs_type: fs_type.into(),
            super_options: opts.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn mode_from_the_mount_table() {
        // This machine's shape: separate cpu and cpuacct mounts plus cgroup2 at unified.
        let hybrid = [
            entry("/sys/fs/cgroup/cpu", "cgroup", &["rw", "cpu"]),
            entry("/sys/fs/cgroup/cpuacct", "cgroup", &["rw", "cpuacct"]),
            entry("/sys/fs/cgroup/memory", "cgroup", &["rw", "memory"]),
            entry("/sys/fs/cgroup/pids", "cgroup", &["rw", "pids"]),
            entry("/sys/fs/cgroup/unified", "cgroup2", &["rw"]),
        ];
        let c = Cgroups::from_mounts(Path::new("m"), &hybrid).unwrap();
        assert_eq!(c.version(), Version::V1);
        let unified = [entry("/sys/fs/cgroup", "cgroup2", &["rw"])];
        let c = Cgroups::from_mounts(Path::new("m"), &unified).unwrap();
        assert_eq!(c.version(), Version::V2);
        // v1 without a memory hierarchy falls back to a cgroup2 mount, or fails naming it.
        let no_memory = [
            entry("/sys/fs/cgroup/cpu", "cgroup", &["rw", "cpu"]),
            entry("/sys/fs/cgroup/unified", "cgroup2", &["rw"]),
        ];
        let c = Cgroups::from_mounts(Path::new("m"), &no_memory).unwrap();
        assert_eq!(
            c.memory_dir("/a"),
            PathBuf::from("/sys/fs/cgroup/unified/a")
        );
        let err = Cgroups::from_mounts(Path::new("m"), &no_memory[..1]).unwrap_err();
        assert!(err.to_string().contains("no memory cgroup"), "{err}");
        // cpu alone stands in for cpuacct, and cpuacct alone for cpu.
        let cpu_only = [
            entry("/sys/fs/cgroup/cpu", "cgroup", &["rw", "cpu"]),
            entry("/sys/fs/cgroup/memory", "cgroup", &["rw", "memory"]),
        ];
        let c = Cgroups::from_mounts(Path::new("m"), &cpu_only).unwrap();
        assert_eq!(c.cpu_dir("/a"), PathBuf::from("/sys/fs/cgroup/cpu/a"));
        let err = Cgroups::from_mounts(Path::new("m"), &cpu_only[1..]).unwrap_err();
        assert!(err.to_string().contains("no cpu cgroup"), "{err}");
    }

    #[test]
    fn v1_mount_root_inside_a_container_is_stripped() {
        let mounts = parse_mountinfo(
            Path::new("mountinfo"),
            "1 0 0:1 /kubepods/podx /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
             2 0 0:2 /kubepods/podx /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n",
        )
        .unwrap();
        let c = Cgroups::from_mounts(Path::new("m"), &mounts).unwrap();
        assert_eq!(
            c.memory_dir("/kubepods/podx/ctr"),
            PathBuf::from("/sys/fs/cgroup/memory/ctr")
        );
    }

    #[test]
    fn process_cgroup_per_controller() {
        let v1 = Cgroups::v1_at("/x");
        let pc = v1
            .process_cgroup("4:memory:/process_api/02d8\n2:cpuacct:/\n8:pids:/\n0::/\n")
            .unwrap();
        assert_eq!(pc.memory, "/process_api/02d8");
        assert_eq!(pc.cpu, "/");
        let v2 = Cgroups::v2_at("/x");
        assert_eq!(
            v2.process_cgroup("0::/system.slice/containerd.service\n")
                .unwrap(),
            ProcessCgroup::same("/system.slice/containerd.service")
        );
    }
}
