//! Readers of the cgroup file formats: one-number files, limits that may say `max`,
//! `key value` files, `cgroup.procs` and /proc/<pid>/cgroup. They take the text where a
//! test feeds fixtures; the `read_*` helpers add the path to every error.

use std::collections::HashMap;
use std::path::Path;

use procfs::FromBufRead;

use super::error::{CgroupError, Result};

pub fn read_string(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| CgroupError::read(path, e))
}

/// A file holding one unsigned number (`memory.current`, `cpuacct.usage`, ...).
pub fn read_u64(path: &Path) -> Result<u64> {
    let text = read_string(path)?;
    text.trim().parse().map_err(|_| {
        CgroupError::parse(path, format!("expected a number, found {:?}", text.trim()))
    })
}

/// A limit file: a number, or `max` for none (v2 `memory.max`, `pids.max`, v1 `pids.max`).
pub fn read_limit(path: &Path) -> Result<Option<u64>> {
    let text = read_string(path)?;
    parse_limit(&text).ok_or_else(|| {
        CgroupError::parse(
            path,
            format!("expected a number or max, found {:?}", text.trim()),
        )
    })
}

pub fn parse_limit(text: &str) -> Option<Option<u64>> {
    match text.trim() {
        "max" => Some(None),
        t => t.parse().ok().map(Some),
    }
}

/// `key value` lines (`memory.stat`, `cpu.stat`, `cpuacct.stat`, `memory.events`). Lines
/// that do not fit are skipped: kernels add keys, and a few carry non-numeric values.
pub fn parse_flat_keyed(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let mut it = line.split_whitespace();
            let key = it.next()?;
            let value = it.next()?.parse().ok()?;
            Some((key.to_string(), value))
        })
        .collect()
}

pub fn read_flat_keyed(path: &Path) -> Result<HashMap<String, u64>> {
    Ok(parse_flat_keyed(&read_string(path)?))
}

/// Number of entries in a `cgroup.procs` file.
pub fn count_lines(text: &str) -> u64 {
    text.lines().filter(|l| !l.trim().is_empty()).count() as u64
}

/// One line of /proc/<pid>/cgroup: `id:controllers:path` (`0::/path` on v2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcCgroup {
    pub controllers: Vec<String>,
    pub path: String,
}

pub fn parse_proc_cgroup(path: &Path, text: &str) -> Result<Vec<ProcCgroup>> {
    let lines = procfs::ProcessCGroups::from_buf_read(text.as_bytes())
        .map_err(|e| CgroupError::parse(path, e.to_string()))?;
    Ok(lines
        .into_iter()
        .map(|l| ProcCgroup {
            controllers: l.controllers,
            path: l.pathname,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::testdata;

    #[test]
    fn limits_and_numbers() {
        assert_eq!(parse_limit("max\n"), Some(None));
        assert_eq!(parse_limit("268435456\n"), Some(Some(268435456)));
        assert_eq!(parse_limit("lots"), None);
        let p = testdata("v1/cpuacct/cpuacct.usage");
        assert!(read_u64(&p).unwrap() > 0);
        let err = read_u64(&testdata("v1/cpuacct/cpuacct.stat")).unwrap_err();
        assert!(err.to_string().contains("cpuacct.stat"), "{err}");
    }

    #[test]
    fn proc_cgroup_lines() {
        let v = parse_proc_cgroup(
            Path::new("cgroup"),
            "4:memory:/process_api/02d8\n2:cpu,cpuacct:/\n0::/\n",
        )
        .unwrap();
        assert_eq!(v[0].controllers, ["memory"]);
        assert_eq!(v[0].path, "/process_api/02d8");
        assert_eq!(v[1].controllers, ["cpu", "cpuacct"]);
        assert!(v[2].controllers.is_empty());
    }

    #[test]
    fn procs_are_counted_by_line() {
        assert_eq!(count_lines("7645\n7651\n"), 2);
        assert_eq!(count_lines(""), 0);
    }

    /// Files from the captured 6.1 unified tree (testdata/v2), in the kernel's own layout.
    #[test]
    fn v2_files_from_a_real_kernel() {
        let pod = "v2/kubepods/burstable/pod7c1f4a2e-9d3b-4e5f-8a6b-1c2d3e4f5a6b";
        let app = format!("{pod}/5e0c1a9d3f7b2e4a6c8d0f1b3a5c7e9d1f3b5a7c9e1d3f5b7a9c1e3d5f7b9a1c");
        let cpu = read_flat_keyed(&testdata(&format!("{app}/cpu.stat"))).unwrap();
        assert_eq!(cpu.len(), 8);
        assert_eq!(cpu["usage_usec"], 2967340);
        // limits.cpu 500m on the app: the busy loop was throttled.
        assert_eq!((cpu["nr_periods"], cpu["nr_throttled"]), (62, 59));
        let mem = read_flat_keyed(&testdata(&format!("{pod}/memory.stat"))).unwrap();
        assert_eq!(mem.len(), 51, "every line of 6.1's memory.stat is numeric");
        assert_eq!(
            (mem["anon"], mem["file"], mem["shmem"], mem["inactive_file"]),
            (8609792, 37879808, 20971520, 16908288)
        );
        assert_eq!(
            read_limit(&testdata(&format!("{pod}/memory.max"))).unwrap(),
            Some(268435456)
        );
        assert_eq!(
            read_limit(&testdata(&format!("{pod}/pids.max"))).unwrap(),
            Some(64)
        );
        assert_eq!(
            read_limit(&testdata(&format!("{app}/memory.max"))).unwrap(),
            None
        );
        assert_eq!(
            read_u64(&testdata(&format!("{app}/memory.current"))).unwrap(),
            47063040
        );
        assert_eq!(
            count_lines(&read_string(&testdata(&format!("{app}/cgroup.procs"))).unwrap()),
            2
        );
        assert_eq!(
            count_lines(&read_string(&testdata(&format!("{pod}/cgroup.procs"))).unwrap()),
            0
        );
    }

    #[test]
    fn flat_keyed_skips_odd_lines() {
        let m = parse_flat_keyed("usage_usec 12\nweird\nname text\nnr 3\n");
        assert_eq!(m.len(), 2);
        assert_eq!(m["usage_usec"], 12);
    }
}
