//! What the stats collector samples of a cgroup (cpu usage, memory, pids), read from
//! the v1 or v2 files of the hierarchies found by `hierarchy`.
//!
//! The files are read directly rather than through cgroups-rs: the handful of counters the
//! Summary API needs (cpu usage, memory usage/stat/limit, pids) are one-line or `key value`
//! files, while cgroups-rs parses v1 key names even on v2 (`rss`/`cache` read 0 there), has no
//! cpuacct on v2, turns missing files into zeros, and its manager pulls in ~177 crates (zbus).
//! A missing file here is an error the caller can see, never a silent 0.

use std::time::SystemTime;

pub use super::convert::UNLIMITED_ABOVE;
use super::error::{CgroupError, Result};
use super::files::{count_lines, read_flat_keyed, read_limit, read_string, read_u64};
use super::hierarchy::{Cgroups, Layout};

/// One cgroup read at one instant. Every part is optional: a v1 process can sit in
/// different paths per controller, and a cgroup can vanish between two reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CgroupSample {
    /// Cumulative CPU time in nanoseconds.
    pub cpu_usage_ns: Option<u64>,
    pub memory: Option<MemorySample>,
    pub pids: Option<PidsSample>,
    /// v2 pressure, when the collector reads it (the KubeletPSI gate).
    pub pressure: Option<super::pressure::Pressure>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemorySample {
    pub usage: u64,
    pub inactive_file: u64,
    /// v1 `total_rss`, v2 `anon`.
    pub rss: u64,
    pub page_faults: u64,
    pub major_page_faults: u64,
    /// None when unlimited.
    pub limit: Option<u64>,
}

impl MemorySample {
    /// usage − inactive_file, floored at 0 (cAdvisor's working set).
    pub fn working_set(&self) -> u64 {
        self.usage.saturating_sub(self.inactive_file)
    }

    /// limit − working set when a limit is set (floored at 0 where upstream would wrap).
    pub fn available(&self) -> Option<u64> {
        available_bytes(self.limit, self.working_set())
    }
}

pub fn available_bytes(limit: Option<u64>, working_set: u64) -> Option<u64> {
    limit
        .filter(|l| *l <= UNLIMITED_ABOVE)
        .map(|l| l.saturating_sub(working_set))
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PidsSample {
    pub current: u64,
    pub max: Option<u64>,
}

/// A process's cgroup paths, per controller on v1 (they can differ) or the one v2 path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessCgroup {
    pub cpu: String,
    pub memory: String,
    pub pids: String,
}

impl ProcessCgroup {
    pub fn same(path: &str) -> Self {
        ProcessCgroup {
            cpu: path.to_string(),
            memory: path.to_string(),
            pids: path.to_string(),
        }
    }
}

impl Cgroups {
    pub fn exists(&self, cgroup: &str) -> bool {
        self.memory_dir(cgroup).is_dir() || self.cpu_dir(cgroup).is_dir()
    }

    /// Reads cpu, memory and pids of one cgroup path (the same path in every hierarchy).
    pub fn read(&self, cgroup: &str) -> Result<CgroupSample> {
        self.read_process(&ProcessCgroup::same(cgroup))
    }

    /// Reads a cgroup given per controller. A controller whose cgroup directory does not
    /// exist is left out; if none exists the cgroup is gone and a not-found error returns.
    pub fn read_process(&self, cg: &ProcessCgroup) -> Result<CgroupSample> {
        let cpu = optional(self.read_cpu(&cg.cpu))?;
        let memory = optional(self.read_memory(&cg.memory))?;
        let pids = optional(self.read_pids(&cg.pids))?.flatten();
        if cpu.is_none() && memory.is_none() {
            let dir = self.memory_dir(&cg.memory);
            return Err(CgroupError::read(
                dir,
                std::io::Error::from(std::io::ErrorKind::NotFound),
            ));
        }
        Ok(CgroupSample {
            cpu_usage_ns: cpu,
            memory,
            pids,
            pressure: None,
        })
    }

    pub fn read_cpu(&self, cgroup: &str) -> Result<u64> {
        let dir = self.cpu_dir(cgroup);
        match self.layout {
            Layout::V1(_) => read_u64(&dir.join("cpuacct.usage")),
            Layout::V2 { .. } => {
                let path = dir.join("cpu.stat");
                let stat = read_flat_keyed(&path)?;
                let usec = stat
                    .get("usage_usec")
                    .ok_or_else(|| CgroupError::parse(&path, "no usage_usec"))?;
                Ok(usec * 1000)
            }
        }
    }

    pub fn read_memory(&self, cgroup: &str) -> Result<MemorySample> {
        let dir = self.memory_dir(cgroup);
        match self.layout {
            Layout::V1(_) => {
                let usage = read_u64(&dir.join("memory.usage_in_bytes"))?;
                let stat = read_flat_keyed(&dir.join("memory.stat"))?;
                // Hierarchical totals when the kernel has them, as cAdvisor reads them.
                let get = |k: &str| {
                    stat.get(&format!("total_{k}"))
                        .or_else(|| stat.get(k))
                        .copied()
                        .unwrap_or(0)
                };
                let limit = read_u64(&dir.join("memory.limit_in_bytes"))?;
                Ok(MemorySample {
                    usage,
                    inactive_file: get("inactive_file"),
                    rss: get("rss"),
                    page_faults: get("pgfault"),
                    major_page_faults: get("pgmajfault"),
                    limit: Some(limit).filter(|l| *l <= UNLIMITED_ABOVE),
                })
            }
            Layout::V2 { .. } => {
                let stat_path = dir.join("memory.stat");
                let stat = read_flat_keyed(&stat_path)?;
                let get = |k: &str| stat.get(k).copied().unwrap_or(0);
                let (usage, limit) = match read_u64(&dir.join("memory.current")) {
                    Ok(u) => (u, read_limit(&dir.join("memory.max"))?),
                    // The root cgroup has no memory.current: the runtime's convention is
                    // anon + file from its memory.stat.
                    Err(e) if e.is_not_found() && is_root(cgroup) => {
                        (get("anon") + get("file"), None)
                    }
                    Err(e) => return Err(e),
                };
                Ok(MemorySample {
                    usage,
                    inactive_file: get("inactive_file"),
                    rss: get("anon"),
                    page_faults: get("pgfault"),
                    major_page_faults: get("pgmajfault"),
                    limit: limit.filter(|l| *l <= UNLIMITED_ABOVE),
                })
            }
        }
    }

    /// pids.current/pids.max; None when there is no pids hierarchy or the cgroup has no
    /// pids files (the root cgroup).
    pub fn read_pids(&self, cgroup: &str) -> Result<Option<PidsSample>> {
        let Some(dir) = self.pids_dir(cgroup) else {
            return Ok(None);
        };
        match read_u64(&dir.join("pids.current")) {
            Ok(current) => Ok(Some(PidsSample {
                current,
                max: optional(read_limit(&dir.join("pids.max")))?.flatten(),
            })),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Processes in `cgroup` and all its descendants (entries of every `cgroup.procs`).
    /// The pod cgroup itself holds none; its containers' leaves hold them.
    pub fn process_count(&self, cgroup: &str) -> Result<u64> {
        let dir = self
            .pids_dir(cgroup)
            .filter(|d| d.is_dir())
            .unwrap_or_else(|| self.memory_dir(cgroup));
        let mut total = 0;
        let mut stack = vec![dir];
        while let Some(d) = stack.pop() {
            let procs = d.join("cgroup.procs");
            match read_string(&procs) {
                Ok(t) => total += count_lines(&t),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
            let entries = match std::fs::read_dir(&d) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(CgroupError::read(&d, e)),
            };
            for entry in entries.flatten() {
                if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    stack.push(entry.path());
                }
            }
        }
        Ok(total)
    }

    /// The earliest modification time among the cgroup's directories: the closest cgroupfs
    /// offers to a creation time (cAdvisor uses the same for a raw cgroup's start).
    pub fn creation_time(&self, cgroup: &str) -> Option<SystemTime> {
        [Some(self.cpu_dir(cgroup)), Some(self.memory_dir(cgroup))]
            .into_iter()
            .flatten()
            .filter_map(|d| std::fs::metadata(d).ok()?.modified().ok())
            .min()
    }
}

fn is_root(cgroup: &str) -> bool {
    cgroup.trim_matches('/').is_empty()
}

/// Not-found becomes None; other errors pass.
fn optional<T>(r: Result<T>) -> Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::testdata;

    const POD: &str = "/kubepods/burstable/pod7c1f4a2e-9d3b-4e5f-8a6b-1c2d3e4f5a6b";
    const APP: &str = "5e0c1a9d3f7b2e4a6c8d0f1b3a5c7e9d1f3b5a7c9e1d3f5b7a9c1e3d5f7b9a1c";
    const PAUSE: &str = "8f2b4d6e0a1c3e5f7b9d1a3c5e7f9b1d3a5c7e9f1b3d5a7c9e1f3b5d7a9c1e3f";

    #[test]
    fn v1_pod_and_containers() {
        let c = Cgroups::v1_at(testdata("v1"));
        let pod = c.read(POD).unwrap();
        assert_eq!(pod.cpu_usage_ns, Some(3148951450));
        let m = pod.memory.unwrap();
        assert_eq!(m.usage, 63979520);
        assert_eq!(m.limit, Some(256 << 20));
        assert!(m.inactive_file > 0 && m.rss > 0 && m.page_faults > 0);
        assert_eq!(m.working_set(), m.usage - m.inactive_file);
        assert_eq!(m.available(), Some((256 << 20) - m.working_set()));
        assert_eq!(
            pod.pids,
            Some(PidsSample {
                current: 3,
                max: Some(64)
            })
        );

        let app = c.read(&format!("{POD}/{APP}")).unwrap();
        // The leaf under a limited pod reports "no limit" of its own.
        assert_eq!(app.memory.as_ref().unwrap().limit, None);
        assert_eq!(app.memory.unwrap().available(), None);
        assert_eq!(app.pids.unwrap().max, None);
        assert_eq!(c.process_count(POD).unwrap(), 3);
        assert_eq!(c.process_count(&format!("{POD}/{PAUSE}")).unwrap(), 1);
    }

    #[test]
    fn v1_root_has_no_pids_files() {
        let c = Cgroups::v1_at(testdata("v1"));
        let root = c.read("/").unwrap();
        assert!(root.cpu_usage_ns.unwrap() > 0);
        assert!(root.memory.as_ref().unwrap().usage > 0);
        assert_eq!(root.memory.unwrap().limit, None);
        assert_eq!(root.pids, None);
    }

    /// The v2 tree is a capture from Debian's 6.1 kernel (hack/capture-cgroup-v2.sh); the
    /// numbers are that VM's, so a parse regression shows as a changed value.
    #[test]
    fn v2_pod_containers_and_root() {
        let c = Cgroups::v2_at(testdata("v2"));
        let pod = c.read(POD).unwrap();
        assert_eq!(pod.cpu_usage_ns, Some(2972622 * 1000));
        let m = pod.memory.unwrap();
        assert_eq!(
            m,
            MemorySample {
                usage: 47173632,
                inactive_file: 16908288,
                rss: 8609792,
                page_faults: 5089,
                major_page_faults: 0,
                limit: Some(268435456),
            }
        );
        assert_eq!(m.working_set(), 47173632 - 16908288);
        assert_eq!(m.available(), Some(268435456 - (47173632 - 16908288)));
        assert_eq!(
            pod.pids,
            Some(PidsSample {
                current: 3,
                max: Some(64)
            })
        );

        // The leaves under a limited pod say `max` of their own.
        let app = c.read(&format!("{POD}/{APP}")).unwrap();
        assert_eq!(app.cpu_usage_ns, Some(2967340 * 1000));
        let am = app.memory.unwrap();
        assert_eq!(
            (am.usage, am.inactive_file, am.rss),
            (47063040, 16908288, 8556544)
        );
        assert_eq!(am.limit, None);
        assert_eq!(
            app.pids,
            Some(PidsSample {
                current: 2,
                max: None
            })
        );
        let pause = c.read(&format!("{POD}/{PAUSE}")).unwrap();
        assert_eq!(pause.cpu_usage_ns, Some(5281 * 1000));
        assert_eq!(pause.memory.unwrap().working_set(), 94208);
        assert_eq!(c.process_count(POD).unwrap(), 3);
        assert_eq!(c.process_count(&format!("{POD}/{PAUSE}")).unwrap(), 1);

        // Every level above the pod has its own files on a real v2 node.
        let kubepods = c.read("/kubepods").unwrap();
        assert_eq!(kubepods.cpu_usage_ns, Some(2972622 * 1000));
        assert_eq!(kubepods.memory.as_ref().unwrap().usage, 47190016);
        assert_eq!(kubepods.memory.unwrap().limit, None);
        assert_eq!(
            kubepods.pids,
            Some(PidsSample {
                current: 3,
                max: None
            })
        );

        // The kernel gives the root cgroup no memory.current, memory.max or pids files.
        for f in ["memory.current", "memory.max", "pids.current", "pids.max"] {
            assert!(!testdata("v2").join(f).exists(), "{f} at the v2 root");
        }
        let root = c.read("/").unwrap();
        assert_eq!(root.cpu_usage_ns, Some(4928000 * 1000));
        let rm = root.memory.unwrap();
        assert_eq!(rm.usage, 8773632 + 39895040);
        assert_eq!(rm.inactive_file, 16908288);
        assert_eq!(rm.limit, None);
        assert_eq!(root.pids, None);
    }

    #[test]
    fn gone_cgroup_is_not_found() {
        let c = Cgroups::v2_at(testdata("v2"));
        let err = c.read("/kubepods/podgone").unwrap_err();
        assert!(err.is_not_found());
        assert!(err.to_string().contains("podgone"), "{err}");
        let c = Cgroups::v1_at(testdata("v1"));
        assert!(c.read("/kubepods/podgone").unwrap_err().is_not_found());
    }

    #[test]
    fn working_set_floors_at_zero() {
        let m = MemorySample {
            usage: 100,
            inactive_file: 250,
            limit: Some(1000),
            ..Default::default()
        };
        assert_eq!(m.working_set(), 0);
        assert_eq!(m.available(), Some(1000));
        assert_eq!(available_bytes(Some(10), 20), Some(0));
        assert_eq!(available_bytes(Some(u64::MAX), 20), None);
    }
}
