//! What `/metrics/cadvisor` reports of a cgroup beyond the Summary's counters: its limits
//! (cAdvisor's container "spec") and the extra counters (user/system cpu, CFS throttling,
//! page cache, swap, failcnt, OOM kills, block I/O per device, processes and threads).
//!
//! Read the way cAdvisor (through runc's cgroup readers) reads them, so the numbers mean what
//! dashboards expect: v1 `total_*` keys of memory.stat (hierarchical, as runc with
//! use_hierarchy), v2 `file`/`anon`/`file_mapped`; a v2 swap figure of `memory.swap.current`
//! alone; a limit file saying `max` stands for "no limit". A file the kernel does not have
//! (the root cgroup's limits, `memory.peak` before 5.19, a v1 host without blkio) leaves its
//! value out or at 0, as cAdvisor does, never an error.

use std::collections::BTreeMap;
use std::path::Path;

use super::convert::weight_to_shares;
use super::error::Result;
use super::files::{parse_flat_keyed, read_string};
use super::hierarchy::Cgroups;
use super::stats::ProcessCgroup;
use super::Version;

/// A limit file that says `max` (v2) or a v1 "unlimited" (above 2^62) reads as this, as
/// cAdvisor's reader does; the renderer turns it into 0.
pub const NO_LIMIT: u64 = u64::MAX;

/// cAdvisor's container spec: the limits of the cgroup.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupSpec {
    /// The cpu controller is there (then period and shares are reported).
    pub has_cpu: bool,
    /// CFS period in µs.
    pub cpu_period: u64,
    /// CFS quota in µs; 0 when unlimited (then no quota series, as upstream).
    pub cpu_quota: u64,
    /// v1 cpu.shares, or v2 cpu.weight converted back to shares as cAdvisor does.
    pub cpu_shares: u64,
    /// The memory limit files are there.
    pub has_memory: bool,
    pub memory_limit: u64,
    pub memory_swap_limit: u64,
    pub memory_reservation: u64,
}

/// CPU counters, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuDetail {
    pub usage_ns: u64,
    pub user_ns: u64,
    pub system_ns: u64,
    pub periods: u64,
    pub throttled_periods: u64,
    pub throttled_ns: u64,
}

/// Memory figures, in bytes (faults and OOM kills are counts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryDetail {
    pub usage: u64,
    pub max_usage: u64,
    pub failcnt: u64,
    pub kernel: u64,
    pub cache: u64,
    pub rss: u64,
    pub swap: u64,
    pub mapped_file: u64,
    pub active_file: u64,
    pub inactive_file: u64,
    pub working_set: u64,
    pub pgfault: u64,
    pub pgmajfault: u64,
    /// OOM kills in this cgroup (v2 memory.events `oom_kill`, v1 memory.oom_control).
    pub oom_kills: u64,
}

/// Block I/O of one device: operation (`Read`, `Write`, and on v1 also `Sync`, `Async`,
/// `Discard`, `Total`) → value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceIo {
    pub major: u32,
    pub minor: u32,
    pub bytes: BTreeMap<String, u64>,
    pub ops: BTreeMap<String, u64>,
}

/// Processes of the cgroup itself (not its children, as cAdvisor counts), its tasks and limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessDetail {
    pub processes: u64,
    pub threads: u64,
    /// pids.max; 0 when unlimited ("infinity if value is zero").
    pub threads_max: u64,
    pub file_descriptors: u64,
    pub sockets: u64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct CgroupDetail {
    pub spec: CgroupSpec,
    pub cpu: Option<CpuDetail>,
    pub memory: Option<MemoryDetail>,
    pub io: Vec<DeviceIo>,
    pub processes: Option<ProcessDetail>,
    /// v2 pressure, when the collector reads it (the KubeletPSI gate): the
    /// `container_pressure_*` series.
    pub pressure: Option<super::pressure::Pressure>,
}

/// A number file, or None when it is absent or not a number (cAdvisor reads those as 0).
fn number(dir: &Path, file: &str) -> Option<u64> {
    let text = std::fs::read_to_string(dir.join(file)).ok()?;
    match text.trim() {
        "max" => Some(NO_LIMIT),
        t => t.parse().ok(),
    }
}

fn keyed(dir: &Path, file: &str) -> Option<std::collections::HashMap<String, u64>> {
    std::fs::read_to_string(dir.join(file))
        .ok()
        .map(|t| parse_flat_keyed(&t))
}

/// v1's clock ticks per second for cpuacct.stat (USER_HZ, 100 on every Linux ABI).
const USER_HZ: u64 = 100;

impl Cgroups {
    /// Reads the spec and extra counters of one cgroup. A cgroup whose directories are all
    /// gone gives a not-found error (the caller leaves it out); missing single files do not.
    pub fn read_detail(&self, cg: &ProcessCgroup, proc_root: &Path) -> Result<CgroupDetail> {
        let v2 = self.version() == Version::V2;
        let memory_dir = self.memory_dir(&cg.memory);
        let cpuacct_dir = self.cpu_dir(&cg.cpu);
        if !memory_dir.is_dir() && !cpuacct_dir.is_dir() {
            // Same error as the summary's reader gives for a vanished cgroup.
            read_string(&memory_dir.join("memory.stat"))?;
        }
        let cpu_dir = self.cpu_controller_dir(&cg.cpu);
        let mut spec = CgroupSpec::default();

        // CPU spec and throttling.
        let mut cpu = None;
        if let Some(dir) = cpu_dir.as_deref().filter(|d| d.is_dir()) {
            spec.has_cpu = true;
            if v2 {
                spec.cpu_shares = number(dir, "cpu.weight")
                    .and_then(weight_to_shares)
                    .unwrap_or(0);
                if let Ok(max) = std::fs::read_to_string(dir.join("cpu.max")) {
                    let mut it = max.split_whitespace();
                    if let (Some(q), Some(p)) = (it.next(), it.next()) {
                        spec.cpu_quota = if q == "max" {
                            0
                        } else {
                            q.parse().unwrap_or(0)
                        };
                        spec.cpu_period = p.parse().unwrap_or(0);
                    }
                }
            } else {
                spec.cpu_shares = number(dir, "cpu.shares").unwrap_or(0);
                spec.cpu_period = number(dir, "cpu.cfs_period_us").unwrap_or(0);
                // -1 (no quota) does not parse as a u64: 0, as upstream.
                spec.cpu_quota = number(dir, "cpu.cfs_quota_us").unwrap_or(0);
            }
        }
        if v2 {
            if let Some(stat) = keyed(&cpuacct_dir, "cpu.stat") {
                let us = |k: &str| stat.get(k).copied().unwrap_or(0) * 1000;
                cpu = Some(CpuDetail {
                    usage_ns: us("usage_usec"),
                    user_ns: us("user_usec"),
                    system_ns: us("system_usec"),
                    periods: stat.get("nr_periods").copied().unwrap_or(0),
                    throttled_periods: stat.get("nr_throttled").copied().unwrap_or(0),
                    throttled_ns: us("throttled_usec"),
                });
            }
        } else if let Some(usage_ns) = number(&cpuacct_dir, "cpuacct.usage") {
            let ticks = keyed(&cpuacct_dir, "cpuacct.stat").unwrap_or_default();
            let ns = |k: &str| ticks.get(k).copied().unwrap_or(0) * (1_000_000_000 / USER_HZ);
            let throttling = cpu_dir
                .as_deref()
                .and_then(|d| keyed(d, "cpu.stat"))
                .unwrap_or_default();
            let t = |k: &str| throttling.get(k).copied().unwrap_or(0);
            cpu = Some(CpuDetail {
                usage_ns,
                user_ns: ns("user"),
                system_ns: ns("system"),
                periods: t("nr_periods"),
                throttled_periods: t("nr_throttled"),
                throttled_ns: t("throttled_time"),
            });
        }

        // Memory spec and figures.
        let mut memory = None;
        if v2 {
            if memory_dir.join("memory.max").exists() {
                spec.has_memory = true;
                spec.memory_limit = number(&memory_dir, "memory.max").unwrap_or(0);
                spec.memory_swap_limit = number(&memory_dir, "memory.swap.max").unwrap_or(0);
                spec.memory_reservation = number(&memory_dir, "memory.min").unwrap_or(0);
            }
            if let Some(stat) = keyed(&memory_dir, "memory.stat") {
                let get = |k: &str| stat.get(k).copied().unwrap_or(0);
                // The root has no memory.current: anon + file, as the Summary reports it.
                let usage =
                    number(&memory_dir, "memory.current").unwrap_or(get("anon") + get("file"));
                let events = keyed(&memory_dir, "memory.events").unwrap_or_default();
                let inactive = get("inactive_file");
                memory = Some(MemoryDetail {
                    usage,
                    max_usage: number(&memory_dir, "memory.peak").unwrap_or(0),
                    failcnt: events.get("max").copied().unwrap_or(0),
                    kernel: 0,
                    cache: get("file"),
                    rss: get("anon"),
                    swap: number(&memory_dir, "memory.swap.current").unwrap_or(0),
                    mapped_file: get("file_mapped"),
                    active_file: get("active_file"),
                    inactive_file: inactive,
                    working_set: usage.saturating_sub(inactive),
                    pgfault: get("pgfault"),
                    pgmajfault: get("pgmajfault"),
                    oom_kills: events.get("oom_kill").copied().unwrap_or(0),
                });
            }
        } else if memory_dir.is_dir() {
            spec.has_memory = true;
            spec.memory_limit = number(&memory_dir, "memory.limit_in_bytes").unwrap_or(0);
            spec.memory_swap_limit =
                number(&memory_dir, "memory.memsw.limit_in_bytes").unwrap_or(0);
            spec.memory_reservation =
                number(&memory_dir, "memory.soft_limit_in_bytes").unwrap_or(0);
            if let (Some(usage), Some(stat)) = (
                number(&memory_dir, "memory.usage_in_bytes"),
                keyed(&memory_dir, "memory.stat"),
            ) {
                let get = |k: &str| stat.get(k).copied().unwrap_or(0);
                let inactive = get("total_inactive_file");
                let oom = keyed(&memory_dir, "memory.oom_control").unwrap_or_default();
                memory = Some(MemoryDetail {
                    usage,
                    max_usage: number(&memory_dir, "memory.max_usage_in_bytes").unwrap_or(0),
                    failcnt: number(&memory_dir, "memory.failcnt").unwrap_or(0),
                    kernel: number(&memory_dir, "memory.kmem.usage_in_bytes").unwrap_or(0),
                    cache: get("total_cache"),
                    rss: get("total_rss"),
                    swap: get("total_swap"),
                    mapped_file: get("total_mapped_file"),
                    active_file: get("total_active_file"),
                    inactive_file: inactive,
                    working_set: usage.saturating_sub(inactive),
                    // cAdvisor takes the cgroup's own fault counters, not the total_ ones.
                    pgfault: get("pgfault"),
                    pgmajfault: get("pgmajfault"),
                    oom_kills: oom.get("oom_kill").copied().unwrap_or(0),
                });
            }
        }

        let io = self
            .io_dir(&cg.memory)
            .map(|d| read_io(&d, v2))
            .unwrap_or_default();

        let processes = self.process_detail(cg, &memory_dir, proc_root);

        Ok(CgroupDetail {
            pressure: None,
            spec,
            cpu,
            memory,
            io,
            processes,
        })
    }

    fn process_detail(
        &self,
        cg: &ProcessCgroup,
        memory_dir: &Path,
        proc_root: &Path,
    ) -> Option<ProcessDetail> {
        let pids_dir = self.pids_dir(&cg.pids).filter(|d| d.is_dir());
        let procs_dir = pids_dir.as_deref().unwrap_or(memory_dir);
        let procs = std::fs::read_to_string(procs_dir.join("cgroup.procs")).ok()?;
        let pids: Vec<&str> = procs.lines().filter(|l| !l.trim().is_empty()).collect();
        let (mut fds, mut sockets) = (0, 0);
        for pid in &pids {
            let Ok(entries) = std::fs::read_dir(proc_root.join(pid.trim()).join("fd")) else {
                // The process ended since the listing.
                continue;
            };
            for e in entries.flatten() {
                fds += 1;
                if std::fs::read_link(e.path())
                    .is_ok_and(|l| l.as_os_str().as_encoded_bytes().starts_with(b"socket:"))
                {
                    sockets += 1;
                }
            }
        }
        let (threads, threads_max) = match pids_dir {
            Some(d) => (
                number(&d, "pids.current").unwrap_or(0),
                number(&d, "pids.max")
                    .filter(|m| *m != NO_LIMIT)
                    .unwrap_or(0),
            ),
            None => (0, 0),
        };
        Some(ProcessDetail {
            processes: pids.len() as u64,
            threads,
            threads_max,
            file_descriptors: fds,
            sockets,
        })
    }
}

/// `MAJ:MIN` of an io file line.
fn device_key(id: &str) -> Option<(u32, u32)> {
    let (maj, min) = id.split_once(':')?;
    Some((maj.parse().ok()?, min.parse().ok()?))
}

fn device_entry(devices: &mut BTreeMap<(u32, u32), DeviceIo>, key: (u32, u32)) -> &mut DeviceIo {
    devices.entry(key).or_insert_with(|| DeviceIo {
        major: key.0,
        minor: key.1,
        ..Default::default()
    })
}

/// v2 `io.stat` (`MAJ:MIN rbytes=.. wbytes=.. rios=.. wios=..`) or v1's blkio files (the
/// CFQ ones, else the throttle ones, as runc falls back).
fn read_io(dir: &Path, v2: bool) -> Vec<DeviceIo> {
    let mut devices: BTreeMap<(u32, u32), DeviceIo> = BTreeMap::new();
    if v2 {
        let text = std::fs::read_to_string(dir.join("io.stat")).unwrap_or_default();
        for line in text.lines() {
            let mut fields = line.split_whitespace();
            let Some(key) = fields.next().and_then(device_key) else {
                continue;
            };
            for (k, v) in fields.filter_map(|f| {
                let (k, v) = f.split_once('=')?;
                Some((k, v.parse::<u64>().ok()?))
            }) {
                let (map, op) = match k {
                    "rbytes" => (&mut device_entry(&mut devices, key).bytes, "Read"),
                    "wbytes" => (&mut device_entry(&mut devices, key).bytes, "Write"),
                    "rios" => (&mut device_entry(&mut devices, key).ops, "Read"),
                    "wios" => (&mut device_entry(&mut devices, key).ops, "Write"),
                    _ => continue,
                };
                map.insert(op.to_string(), v);
            }
        }
    } else {
        let pick = |cfq: &str, throttle: &str| {
            std::fs::read_to_string(dir.join(cfq))
                .ok()
                .filter(|t| t.lines().any(|l| l.split_whitespace().count() == 3))
                .or_else(|| std::fs::read_to_string(dir.join(throttle)).ok())
                .unwrap_or_default()
        };
        let bytes = pick(
            "blkio.io_service_bytes_recursive",
            "blkio.throttle.io_service_bytes_recursive",
        );
        let ops = pick(
            "blkio.io_serviced_recursive",
            "blkio.throttle.io_serviced_recursive",
        );
        for (text, is_bytes) in [(bytes, true), (ops, false)] {
            for line in text.lines() {
                let f: Vec<&str> = line.split_whitespace().collect();
                let [id, op, value] = f[..] else { continue };
                let (Some(key), Ok(value)) = (device_key(id), value.parse::<u64>()) else {
                    continue;
                };
                let entry = device_entry(&mut devices, key);
                let map = if is_bytes {
                    &mut entry.bytes
                } else {
                    &mut entry.ops
                };
                map.insert(op.to_string(), value);
            }
        }
    }
    devices.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::testdata;
    use crate::test_support::copy_tree;

    const POD: &str = "/kubepods/burstable/pod7c1f4a2e-9d3b-4e5f-8a6b-1c2d3e4f5a6b";
    const APP: &str = "5e0c1a9d3f7b2e4a6c8d0f1b3a5c7e9d1f3b5a7c9e1d3f5b7a9c1e3d5f7b9a1c";

    /// The captured v2 tree (see testdata/README.md): the app leaf has `cpu.max 50000 100000`
    /// and was throttled 59 times; the pod has `memory.max` 256 MiB and `pids.max` 64.
    #[test]
    fn v2_app_pod_and_root() {
        let c = Cgroups::v2_at(testdata("v2"));
        let proc_root = testdata("proc");
        let app = c
            .read_detail(&ProcessCgroup::same(&format!("{POD}/{APP}")), &proc_root)
            .unwrap();
        assert_eq!(
            app.spec,
            CgroupSpec {
                has_cpu: true,
                cpu_period: 100000,
                cpu_quota: 50000,
                cpu_shares: 0,
                has_memory: true,
                memory_limit: NO_LIMIT,
                memory_swap_limit: 0,
                memory_reservation: 0,
            }
        );
        assert_eq!(
            app.cpu,
            Some(CpuDetail {
                usage_ns: 2_967_340_000,
                user_ns: 1_058_849_000,
                system_ns: 1_908_490_000,
                periods: 62,
                throttled_periods: 59,
                throttled_ns: 4_048_587_000,
            })
        );
        let m = app.memory.unwrap();
        assert_eq!(
            (m.usage, m.cache, m.rss, m.inactive_file, m.working_set),
            (47063040, 37879808, 8556544, 16908288, 47063040 - 16908288)
        );
        assert_eq!((m.pgfault, m.failcnt, m.oom_kills, m.swap), (5050, 0, 0, 0));
        // Below the root io.stat is empty: no devices.
        assert!(app.io.is_empty());
        let p = app.processes.unwrap();
        // Two processes in the leaf; their pids are the VM's, so no fds are found here.
        assert_eq!((p.processes, p.threads, p.threads_max), (2, 2, 0));

        let pod = c
            .read_detail(&ProcessCgroup::same(POD), &proc_root)
            .unwrap();
        assert_eq!(pod.spec.memory_limit, 268435456);
        assert_eq!(pod.spec.cpu_quota, 0, "cpu.max says max");
        assert_eq!(pod.spec.cpu_period, 100000);
        let p = pod.processes.unwrap();
        assert_eq!((p.processes, p.threads, p.threads_max), (0, 3, 64));

        // The root has no limit files: no memory spec, cpu with zeros, usage from memory.stat.
        let root = c
            .read_detail(&ProcessCgroup::same("/"), &proc_root)
            .unwrap();
        assert!(!root.spec.has_memory);
        assert_eq!(root.cpu.unwrap().usage_ns, 4928000 * 1000);
        assert_eq!(root.memory.unwrap().usage, 8773632 + 39895040);
        // `1:0 ` names a device with no counters: nothing to report, as runc parses it.
        assert!(root.io.is_empty());

        let gone = c
            .read_detail(&ProcessCgroup::same("/kubepods/podgone"), &proc_root)
            .unwrap_err();
        assert!(gone.is_not_found(), "{gone}");
    }

    /// Files the captures lack, in the kernel's formats: v2 io.stat counters, memory.events
    /// with OOM kills, memory.peak, swap and cpu.weight; v1 cpu, blkio and memory extras.
    #[test]
    fn io_oom_swap_and_v1_cpu_and_blkio() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("v2");
        copy_tree(&testdata("v2"), &root);
        let app = root.join(POD.trim_start_matches('/')).join(APP);
        std::fs::write(
            app.join("io.stat"),
            "8:0 rbytes=1048576 wbytes=4096 rios=12 wios=1 dbytes=0 dios=0\n253:1 rbytes=7 wbytes=0 rios=1 wios=0 dbytes=0 dios=0\n",
        )
        .unwrap();
        std::fs::write(
            app.join("memory.events"),
            "low 0\nhigh 0\nmax 5\noom 2\noom_kill 2\noom_group_kill 0\n",
        )
        .unwrap();
        std::fs::write(app.join("memory.peak"), "50000000\n").unwrap();
        std::fs::write(app.join("memory.swap.current"), "4096\n").unwrap();
        std::fs::write(app.join("memory.swap.max"), "max\n").unwrap();
        std::fs::write(app.join("cpu.weight"), "100\n").unwrap();
        let c = Cgroups::v2_at(&root);
        let d = c
            .read_detail(
                &ProcessCgroup::same(&format!("{POD}/{APP}")),
                Path::new("/nonexistent"),
            )
            .unwrap();
        let m = d.memory.unwrap();
        assert_eq!(
            (m.failcnt, m.oom_kills, m.max_usage, m.swap),
            (5, 2, 50000000, 4096)
        );
        // weight 100 is the default 1024 shares' image.
        assert_eq!(d.spec.cpu_shares, 2 + (99 * 262142) / 9999);
        assert_eq!(d.spec.memory_swap_limit, NO_LIMIT);
        assert_eq!(d.io.len(), 2);
        assert_eq!((d.io[0].major, d.io[0].minor), (8, 0));
        assert_eq!(d.io[0].bytes["Read"], 1048576);
        assert_eq!(d.io[0].bytes["Write"], 4096);
        assert_eq!(d.io[0].ops["Read"], 12);
        assert_eq!(d.io[1].bytes["Read"], 7);

        // v1: the captured cpuacct and memory files plus cpu and blkio controllers.
        let v1 = tmp.path().join("v1");
        copy_tree(&testdata("v1"), &v1);
        let cpu = v1.join("cpu").join(POD.trim_start_matches('/'));
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::write(cpu.join("cpu.shares"), "512\n").unwrap();
        std::fs::write(cpu.join("cpu.cfs_period_us"), "100000\n").unwrap();
        std::fs::write(cpu.join("cpu.cfs_quota_us"), "-1\n").unwrap();
        std::fs::write(
            cpu.join("cpu.stat"),
            "nr_periods 10\nnr_throttled 3\nthrottled_time 123456789\n",
        )
        .unwrap();
        let blkio = v1.join("blkio").join(POD.trim_start_matches('/'));
        std::fs::create_dir_all(&blkio).unwrap();
        // CFQ files empty (blk-mq): the throttle ones are read, as runc does.
        std::fs::write(blkio.join("blkio.io_service_bytes_recursive"), "Total 0\n").unwrap();
        std::fs::write(
            blkio.join("blkio.throttle.io_service_bytes_recursive"),
            "8:0 Read 2048\n8:0 Write 1024\n8:0 Sync 3072\n8:0 Async 0\n8:0 Discard 0\n8:0 Total 3072\nTotal 3072\n",
        )
        .unwrap();
        let mem = v1.join("memory").join(POD.trim_start_matches('/'));
        std::fs::write(mem.join("memory.failcnt"), "4\n").unwrap();
        std::fs::write(
            mem.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
        )
        .unwrap();
        let c = Cgroups::v1_at(&v1);
        let d = c
            .read_detail(&ProcessCgroup::same(POD), Path::new("/nonexistent"))
            .unwrap();
        assert_eq!(
            (d.spec.cpu_shares, d.spec.cpu_period, d.spec.cpu_quota),
            (512, 100000, 0)
        );
        assert_eq!(d.spec.memory_limit, 256 << 20);
        let cpu = d.cpu.unwrap();
        assert_eq!(cpu.usage_ns, 3148951450);
        assert_eq!(
            (cpu.periods, cpu.throttled_periods, cpu.throttled_ns),
            (10, 3, 123456789)
        );
        let stat = std::fs::read_to_string(
            v1.join("cpuacct")
                .join(POD.trim_start_matches('/'))
                .join("cpuacct.stat"),
        )
        .unwrap();
        let user_ticks: u64 = stat
            .lines()
            .find_map(|l| l.strip_prefix("user "))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(cpu.user_ns, user_ticks * 10_000_000);
        let m = d.memory.unwrap();
        assert_eq!((m.failcnt, m.oom_kills, m.usage), (4, 1, 63979520));
        assert_eq!(m.working_set, m.usage - m.inactive_file);
        assert!(m.cache > 0 && m.rss > 0);
        assert_eq!(d.io.len(), 1);
        assert_eq!(d.io[0].bytes["Read"], 2048);
        assert_eq!(d.io[0].bytes["Total"], 3072);
    }
}
