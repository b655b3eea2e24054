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

use super::cgroup::{CgroupVersion, Cgroups, ProcessCgroup};
use super::error::Result;
use super::parse::{parse_flat_keyed, read_string};

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

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupDetail {
    pub spec: CgroupSpec,
    pub cpu: Option<CpuDetail>,
    pub memory: Option<MemoryDetail>,
    pub io: Vec<DeviceIo>,
    pub processes: Option<ProcessDetail>,
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

/// cAdvisor's conversion of a v2 cpu.weight (1..10000) back to v1 shares (2..262144).
pub fn weight_to_shares(weight: u64) -> Option<u64> {
    if !(1..=10000).contains(&weight) {
        return None;
    }
    Some(2 + ((weight - 1) * 262142) / 9999)
}

/// v1's clock ticks per second for cpuacct.stat (USER_HZ, 100 on every Linux ABI).
const USER_HZ: u64 = 100;

impl Cgroups {
    /// Reads the spec and extra counters of one cgroup. A cgroup whose directories are all
    /// gone gives a not-found error (the caller leaves it out); missing single files do not.
    pub fn read_detail(&self, cg: &ProcessCgroup, proc_root: &Path) -> Result<CgroupDetail> {
        let v2 = self.version() == CgroupVersion::V2;
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
