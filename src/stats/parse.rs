//! Parsers for the cgroup and /proc file formats the collector reads. They take the text,
//! so tests feed them fixtures and the collector reads a configurable /proc root; the
//! `read_*` helpers add the path to every error. The /proc formats go through procfs's
//! parsers (from text, so the root can be a fixture); cgroup files are read directly (see `stats::cgroup` for why).

use std::collections::HashMap;
use std::path::Path;

use procfs::{FromBufRead, FromBufReadSI, FromRead};

use super::error::{Result, StatsError};

fn procfs_error(path: &Path, e: procfs::ProcError) -> StatsError {
    StatsError::parse(path, e.to_string())
}

pub fn read_string(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| StatsError::read(path, e))
}

/// A file holding one unsigned number (`memory.current`, `cpuacct.usage`, ...).
pub fn read_u64(path: &Path) -> Result<u64> {
    let text = read_string(path)?;
    text.trim()
        .parse()
        .map_err(|_| StatsError::parse(path, format!("expected a number, found {:?}", text.trim())))
}

/// A limit file: a number, or `max` for none (v2 `memory.max`, `pids.max`, v1 `pids.max`).
pub fn read_limit(path: &Path) -> Result<Option<u64>> {
    let text = read_string(path)?;
    parse_limit(&text).ok_or_else(|| {
        StatsError::parse(
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

/// `key value` lines (`memory.stat`, `cpu.stat`, `cpuacct.stat`). Lines that do not fit are
/// skipped: kernels add keys, and a few carry non-numeric values.
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

/// MemTotal of /proc/meminfo, in bytes (the file says kB and means KiB).
pub fn parse_mem_total(path: &Path, text: &str) -> Result<u64> {
    procfs::Meminfo::from_buf_read(text.as_bytes())
        .map(|m| m.mem_total)
        .map_err(|e| procfs_error(path, e))
}

/// Counters of one interface from a `net/dev` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceCounters {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_errors: u64,
    pub rx_dropped: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errors: u64,
    pub tx_dropped: u64,
}

/// `/proc/<pid>/net/dev`: two header lines, then `name: 8 receive and 8 transmit columns`.
/// The name is split at the colon because long counters touch it (`eth0:137410592`).
/// Hand-parsed rather than through procfs, whose parser returns a map: the kernel's order of
/// the interfaces is the order cAdvisor, and so the Summary API, lists them in.
pub fn parse_net_dev(path: &Path, text: &str) -> Result<Vec<InterfaceCounters>> {
    let mut out = Vec::new();
    for line in text.lines().skip(2) {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let cols: Vec<u64> = rest
            .split_whitespace()
            .map(|c| c.parse::<u64>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| StatsError::parse(path, format!("bad counters in line {line:?}")))?;
        if cols.len() < 16 {
            return Err(StatsError::parse(
                path,
                format!(
                    "expected 16 counters, found {} in line {line:?}",
                    cols.len()
                ),
            ));
        }
        out.push(InterfaceCounters {
            name: name.trim().to_string(),
            rx_bytes: cols[0],
            rx_packets: cols[1],
            rx_errors: cols[2],
            rx_dropped: cols[3],
            tx_bytes: cols[8],
            tx_packets: cols[9],
            tx_errors: cols[10],
            tx_dropped: cols[11],
        });
    }
    Ok(out)
}

/// One line of /proc/self/mountinfo, the fields the cgroup detection needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// The path inside the mounted filesystem that is the mount's root (not `/` inside a
    /// container whose cgroup namespace is not the host's).
    pub root: String,
    pub mount_point: String,
    pub fs_type: String,
    pub super_options: Vec<String>,
}

/// The cgroup2 mount at /sys/fs/cgroup: a unified host. Shared by the stats collector's and
/// the container manager's detection, so both see the same hierarchy.
pub fn unified_at_sys_fs_cgroup(mounts: &[MountEntry]) -> Option<&MountEntry> {
    mounts
        .iter()
        .find(|m| m.fs_type == "cgroup2" && m.mount_point == "/sys/fs/cgroup")
}

/// The v1 hierarchy that carries `controller`.
pub fn v1_hierarchy<'a>(mounts: &'a [MountEntry], controller: &str) -> Option<&'a MountEntry> {
    mounts
        .iter()
        .find(|m| m.fs_type == "cgroup" && m.super_options.iter().any(|o| o == controller))
}

/// Any cgroup2 mount (a hybrid host's `unified`): the fallback when v1 lacks a controller.
pub fn any_unified(mounts: &[MountEntry]) -> Option<&MountEntry> {
    mounts.iter().find(|m| m.fs_type == "cgroup2")
}

pub fn parse_mountinfo(path: &Path, text: &str) -> Result<Vec<MountEntry>> {
    let mounts = procfs::process::MountInfos::from_buf_read(text.as_bytes())
        .map_err(|e| procfs_error(path, e))?;
    Ok(mounts
        .into_iter()
        .map(|m| MountEntry {
            // procfs leaves the kernel's octal escapes in place.
            root: unescape_octal(&m.root),
            mount_point: unescape_octal(&m.mount_point.to_string_lossy()),
            fs_type: m.fs_type,
            super_options: m.super_options.into_keys().collect(),
        })
        .collect())
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let oct = std::str::from_utf8(&b[i + 1..i + 4]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(oct, 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One line of /proc/<pid>/cgroup: `id:controllers:path` (`0::/path` on v2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcCgroup {
    pub controllers: Vec<String>,
    pub path: String,
}

pub fn parse_proc_cgroup(path: &Path, text: &str) -> Result<Vec<ProcCgroup>> {
    let lines = procfs::ProcessCGroups::from_buf_read(text.as_bytes())
        .map_err(|e| procfs_error(path, e))?;
    Ok(lines
        .into_iter()
        .map(|l| ProcCgroup {
            controllers: l.controllers,
            path: l.pathname,
        })
        .collect())
}

/// The fourth field of /proc/loadavg is `running/total`; upstream reports the total tasks
/// (threads included), which sysinfo(2) would truncate past 65535.
pub fn parse_loadavg_tasks(path: &Path, text: &str) -> Result<u64> {
    procfs::LoadAverage::from_read(text.as_bytes())
        .map(|l| u64::from(l.max))
        .map_err(|e| procfs_error(path, e))
}

/// `btime` of /proc/stat: boot time in seconds since the epoch.
pub fn parse_btime(path: &Path, text: &str) -> Result<i64> {
    let stats = procfs::KernelStats::from_buf_read(text.as_bytes(), procfs::current_system_info())
        .map_err(|e| procfs_error(path, e))?;
    i64::try_from(stats.btime).map_err(|_| StatsError::parse(path, "btime out of range"))
}

/// Number of entries in a `cgroup.procs` file.
pub fn count_lines(text: &str) -> u64 {
    text.lines().filter(|l| !l.trim().is_empty()).count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixture(rel: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("src/stats/testdata")
            .join(rel)
    }

    #[test]
    fn meminfo_is_in_bytes() {
        let p = fixture("proc/meminfo");
        assert_eq!(
            parse_mem_total(&p, &read_string(&p).unwrap()).unwrap(),
            24683584 * 1024
        );
        let err = parse_mem_total(&p, "MemFree: 1 kB\n").unwrap_err();
        assert!(err.to_string().contains("proc/meminfo"), "{err}");
    }

    #[test]
    fn net_dev_of_host_and_pod() {
        let p = fixture("proc/1/net/dev");
        let ifs = parse_net_dev(&p, &read_string(&p).unwrap()).unwrap();
        let names: Vec<_> = ifs.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(
            names,
            ["lo", "ifb0", "ifb1", "eth0", "kubers0", "veth1e4bfee4"]
        );
        let eth0 = &ifs[3];
        assert_eq!((eth0.rx_bytes, eth0.tx_bytes), (137410592, 311244));

        let p = fixture("proc/7644/net/dev");
        let ifs = parse_net_dev(&p, &read_string(&p).unwrap()).unwrap();
        assert_eq!(
            ifs[1],
            InterfaceCounters {
                name: "eth0".into(),
                rx_bytes: 1048576,
                rx_packets: 812,
                rx_errors: 3,
                rx_dropped: 0,
                tx_bytes: 524288,
                tx_packets: 401,
                tx_errors: 1,
                tx_dropped: 0,
            }
        );
    }

    #[test]
    fn net_dev_counter_touching_the_colon() {
        let text = "h1\nh2\n  eth0:137410592    5236    0    0    0     0          0         0   311244    3474    7    0    0     0       0          0\n";
        let ifs = parse_net_dev(Path::new("x"), text).unwrap();
        assert_eq!(ifs[0].rx_bytes, 137410592);
        assert_eq!(ifs[0].tx_errors, 7);
        assert_eq!((ifs[0].rx_packets, ifs[0].tx_packets), (5236, 3474));
        let bad = "h1\nh2\n eth0: 1 2 3\n";
        let err = parse_net_dev(Path::new("/proc/9/net/dev"), bad).unwrap_err();
        assert!(err.to_string().contains("/proc/9/net/dev"), "{err}");
    }

    #[test]
    fn limits_and_numbers() {
        assert_eq!(parse_limit("max\n"), Some(None));
        assert_eq!(parse_limit("268435456\n"), Some(Some(268435456)));
        assert_eq!(parse_limit("lots"), None);
        let p = fixture("v1/cpuacct/cpuacct.usage");
        assert!(read_u64(&p).unwrap() > 0);
        let err = read_u64(&fixture("v1/cpuacct/cpuacct.stat")).unwrap_err();
        assert!(err.to_string().contains("cpuacct.stat"), "{err}");
    }

    #[test]
    fn mountinfo_hybrid_host() {
        let p = fixture("proc/mountinfo.hybrid");
        let m = parse_mountinfo(&p, &read_string(&p).unwrap()).unwrap();
        let mem = m
            .iter()
            .find(|e| e.mount_point == "/sys/fs/cgroup/memory")
            .unwrap();
        assert_eq!(mem.fs_type, "cgroup");
        assert!(mem.super_options.contains(&"memory".to_string()));
        assert!(m
            .iter()
            .any(|e| e.fs_type == "cgroup2" && e.mount_point == "/sys/fs/cgroup/unified"));
    }

    #[test]
    fn mountinfo_escapes() {
        let m = parse_mountinfo(
            Path::new("mountinfo"),
            "40 31 0:38 /a\\040b /mnt/with\\040space rw - cgroup2 cgroup2 rw\n",
        )
        .unwrap();
        assert_eq!(m[0].mount_point, "/mnt/with space");
        assert_eq!(m[0].root, "/a b");
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
    fn loadavg_btime_and_procs() {
        let p = fixture("proc/loadavg");
        assert!(parse_loadavg_tasks(&p, &read_string(&p).unwrap()).unwrap() > 0);
        assert_eq!(
            parse_loadavg_tasks(&p, "0.91 1.11 1.34 1/131 7376").unwrap(),
            131
        );
        assert!(parse_loadavg_tasks(&p, "0.91").is_err());
        let p = fixture("proc/stat");
        assert_eq!(
            parse_btime(&p, &read_string(&p).unwrap()).unwrap(),
            1796215659
        );
        assert_eq!(count_lines("7645\n7651\n"), 2);
        assert_eq!(count_lines(""), 0);
    }

    /// Files from the captured 6.1 unified tree (testdata/v2), in the kernel's own layout.
    #[test]
    fn v2_files_from_a_real_kernel() {
        let pod = "v2/kubepods/burstable/pod7c1f4a2e-9d3b-4e5f-8a6b-1c2d3e4f5a6b";
        let app = format!("{pod}/5e0c1a9d3f7b2e4a6c8d0f1b3a5c7e9d1f3b5a7c9e1d3f5b7a9c1e3d5f7b9a1c");
        let cpu = read_flat_keyed(&fixture(&format!("{app}/cpu.stat"))).unwrap();
        assert_eq!(cpu.len(), 8);
        assert_eq!(cpu["usage_usec"], 2967340);
        // limits.cpu 500m on the app: the busy loop was throttled.
        assert_eq!((cpu["nr_periods"], cpu["nr_throttled"]), (62, 59));
        let mem = read_flat_keyed(&fixture(&format!("{pod}/memory.stat"))).unwrap();
        assert_eq!(mem.len(), 51, "every line of 6.1's memory.stat is numeric");
        assert_eq!(
            (mem["anon"], mem["file"], mem["shmem"], mem["inactive_file"]),
            (8609792, 37879808, 20971520, 16908288)
        );
        assert_eq!(
            read_limit(&fixture(&format!("{pod}/memory.max"))).unwrap(),
            Some(268435456)
        );
        assert_eq!(
            read_limit(&fixture(&format!("{pod}/pids.max"))).unwrap(),
            Some(64)
        );
        assert_eq!(
            read_limit(&fixture(&format!("{app}/memory.max"))).unwrap(),
            None
        );
        assert_eq!(
            read_u64(&fixture(&format!("{app}/memory.current"))).unwrap(),
            47063040
        );
        assert_eq!(
            count_lines(&read_string(&fixture(&format!("{app}/cgroup.procs"))).unwrap()),
            2
        );
        assert_eq!(
            count_lines(&read_string(&fixture(&format!("{pod}/cgroup.procs"))).unwrap()),
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
