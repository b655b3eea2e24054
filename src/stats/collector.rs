//! The housekeeping collector: one snapshot of every cgroup, /proc file and filesystem per
//! tick, kept in a cache that the Summary API, /metrics/resource and eviction read. Requests
//! never touch files.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};

use super::cadvisor::{render_cadvisor_metrics, CadvisorSnapshot};
use super::disk::{device_size, statvfs, DiskUsage, DiskUsageCache, FsCapacity};
use super::error::{Result, StatsError};
use super::parse::{
    parse_btime, parse_loadavg_tasks, parse_mem_total, parse_net_dev, read_string, read_u64,
    InterfaceCounters,
};
use super::prometheus::render_resource_metrics;
use super::summary::*;
use crate::cgroups::pressure::Pressure;
use crate::cgroups::stats::available_bytes;
use crate::cgroups::{CgroupSample, Cgroups, ProcessCgroup};

/// The interface upstream reports inline in NetworkStats.
pub const DEFAULT_INTERFACE: &str = "eth0";
/// Interfaces cAdvisor leaves out of network stats (matched as lowercase prefixes).
const IGNORED_INTERFACE_PREFIXES: [&str; 4] = ["lo", "veth", "docker", "nerdctl"];

/// One container of a running pod, as the runtime knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerInfo {
    pub name: String,
    pub id: String,
    /// The image as the runtime records it (`/metrics/cadvisor`'s `image` label).
    pub image: String,
    /// The container's cgroup path, e.g. `/kubepods/burstable/pod<uid>/<id>`.
    pub cgroup_path: String,
    /// Creation time (upstream's container `startTime`).
    pub start_time: DateTime<Utc>,
    /// `/var/log/pods/<ns>_<name>_<uid>/<container>`: measured for `logs`.
    pub log_dir: Option<PathBuf>,
    /// The writable layer (overlay upper dir): measured for `rootfs`.
    pub rootfs_upper: Option<PathBuf>,
}

/// A volume whose usage is reported under `volume` (and counted in ephemeral storage when
/// it lives on the node's filesystem, like emptyDir or configMap).
#[derive(Debug, Clone, PartialEq)]
pub struct VolumeInfo {
    pub name: String,
    pub path: PathBuf,
    pub ephemeral: bool,
    pub measure: Measure,
    /// The claim behind it (a persistentVolumeClaim or generic ephemeral volume): its
    /// stats carry `pvcRef` and are the `kubelet_volume_stats_*` series.
    pub pvc: Option<PvcReference>,
}

/// How a volume's usage is found, as upstream's volume plugins' metrics providers do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// Walked for what it holds, its filesystem's statfs for the rest (emptyDir, configMap,
    /// secret, downwardAPI, projected: upstream's MetricsDu).
    Walk,
    /// Its filesystem's statfs alone, used = capacity - free (a `local` PV: MetricsStatFS).
    StatFs,
    /// What its driver last said (`reported_volumes`, CSI's NodeGetVolumeStats).
    Reported,
    /// A raw block device: its size is the capacity, every other figure 0 (a `local` block
    /// PV: upstream's MetricsBlock).
    DeviceSize,
}

/// A volume's usage as its driver reports it, each value as far as it does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReportedUsage {
    pub capacity: Option<u64>,
    pub available: Option<u64>,
    pub used: Option<u64>,
    pub inodes: Option<u64>,
    pub inodes_free: Option<u64>,
    pub inodes_used: Option<u64>,
}

/// Drivers' reports by the volume's path, filled outside the collector (the driver calls
/// are async; the tick is not).
pub type ReportedVolumes = Arc<RwLock<HashMap<PathBuf, ReportedUsage>>>;

/// One running pod, as the runtime knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct PodInfo {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    /// The sandbox (pause) process: its network namespace gives the pod's network stats.
    pub pause_pid: Option<u32>,
    /// The running sandbox: its own cgroup's series in `/metrics/cadvisor`.
    pub sandbox: Option<SandboxInfo>,
    /// The pod cgroup, e.g. `/kubepods/burstable/pod<uid>`.
    pub cgroup_parent: String,
    pub start_time: DateTime<Utc>,
    /// App and init containers that exist now (not the sandbox; its usage is in the pod cgroup).
    pub containers: Vec<ContainerInfo>,
    pub volumes: Vec<VolumeInfo>,
    /// The pod's own files on the node's filesystem (its etc-hosts): counted in its
    /// ephemeral storage, as upstream's pod etc-hosts stats, but no volume.
    pub host_files: Vec<PathBuf>,
}

/// A pod's sandbox (pause) container.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxInfo {
    pub id: String,
    pub image: String,
}

/// What runs now. The lead implements it from the agent's runtime state; it is called once
/// per tick on a blocking thread and should answer from memory, not from containerd.
pub trait PodLister: Send + Sync + 'static {
    fn running_pods(&self) -> Vec<PodInfo>;
}

impl<F> PodLister for F
where
    F: Fn() -> Vec<PodInfo> + Send + Sync + 'static,
{
    fn running_pods(&self) -> Vec<PodInfo> {
        self()
    }
}

#[derive(Debug, Clone)]
pub struct CollectorConfig {
    pub node_name: String,
    /// Time between snapshots (upstream housekeeping: 10 s).
    pub housekeeping_interval: Duration,
    /// Directory walks (writable layers, logs, volumes, image fs) are refreshed at most this
    /// often; between walks the last result is reported.
    pub disk_usage_interval: Duration,
    /// /proc, injectable for tests.
    pub proc_root: PathBuf,
    /// A directory on the node filesystem (the agent's root dir): `node.fs`.
    pub node_fs_dir: PathBuf,
    /// A directory on the image filesystem (containerd's root): capacity of `imageFs`.
    pub image_fs_dir: PathBuf,
    /// Walked for `imageFs.usedBytes` (the snapshotter's directory, as containerd reports).
    pub image_fs_usage_dir: Option<PathBuf>,
    /// The pods' cgroup root: the `pods` system container.
    pub pods_cgroup: String,
    /// The agent's cgroup (`kubelet` system container); None = the process's own.
    pub kubelet_cgroup: Option<ProcessCgroup>,
    /// containerd's cgroup (`runtime` system container), when it is fixed (`--runtime-cgroups`).
    pub runtime_cgroup: Option<ProcessCgroup>,
    /// Otherwise the runtime's process name: its cgroup is looked up again at every tick, so
    /// a runtime started after the agent, or restarted into another cgroup, is followed.
    pub runtime_process: Option<String>,
    /// Reported as the `kubelet` system container's start.
    pub kubelet_start_time: DateTime<Utc>,
    /// /sys (block devices, DMI) and /etc (machine-id, os-release), injectable for tests.
    pub sys_root: PathBuf,
    pub etc_root: PathBuf,
    /// The `Measure::Reported` volumes' usage.
    pub reported_volumes: ReportedVolumes,
    /// The KubeletPSI gate: cgroup v2 pressure in the Summary and `/metrics/cadvisor`.
    pub psi: bool,
}

impl CollectorConfig {
    pub fn new(node_name: impl Into<String>) -> Self {
        CollectorConfig {
            node_name: node_name.into(),
            housekeeping_interval: Duration::from_secs(10),
            disk_usage_interval: Duration::from_secs(60),
            proc_root: PathBuf::from("/proc"),
            node_fs_dir: PathBuf::from(crate::config::DEFAULT_ROOT_DIR),
            image_fs_dir: PathBuf::from("/var/lib/containerd"),
            image_fs_usage_dir: Some(PathBuf::from(
                "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs",
            )),
            pods_cgroup: "/kubepods".into(),
            kubelet_cgroup: None,
            runtime_cgroup: None,
            runtime_process: Some("containerd".into()),
            kubelet_start_time: Utc::now(),
            sys_root: PathBuf::from("/sys"),
            etc_root: PathBuf::from("/etc"),
            reported_volumes: ReportedVolumes::default(),
            psi: true,
        }
    }
}

/// The cached result of the last housekeeping tick.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// None until the first tick finished.
    pub summary: Option<Summary>,
    pub taken_at: Option<DateTime<Utc>>,
    /// Problems of the last tick other than containers that went away; any makes
    /// `resource_scrape_error` 1.
    pub errors: Vec<String>,
    /// What `/metrics/cadvisor` renders.
    pub cadvisor: CadvisorSnapshot,
}

/// A process's cgroups, read from `<proc_root>/<pid>/cgroup` (e.g. containerd's pid for the
/// `runtime` system container).
pub fn cgroup_of_pid(cgroups: &Cgroups, proc_root: &Path, pid: u32) -> Result<ProcessCgroup> {
    let path = proc_root.join(pid.to_string()).join("cgroup");
    let text = read_string(&path)?;
    cgroups
        .process_cgroup(&text)
        .ok_or_else(|| StatsError::parse(&path, "no memory (v1) or unified (v2) line"))
}

fn process_name(proc_root: &Path, pid: u32) -> Option<String> {
    let comm = std::fs::read_to_string(proc_root.join(pid.to_string()).join("comm")).ok()?;
    Some(comm.trim_end().to_string())
}

/// The lowest pid whose command name is `name` (the daemon, not a child it forked later).
pub fn find_process(proc_root: &Path, name: &str) -> Option<u32> {
    std::fs::read_dir(proc_root)
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| process_name(proc_root, *pid).as_deref() == Some(name))
        .min()
}

#[derive(Debug, Clone, Copy)]
struct CpuPoint {
    at: Instant,
    usage_ns: u64,
}

/// Mutable state between ticks: the previous cpu sample of each cgroup (for rates) and the
/// directory walk cache.
struct SamplerState {
    previous_cpu: HashMap<String, CpuPoint>,
    disk: DiskUsageCache,
    /// Read once: machine facts, kernel and OS, block device names by major:minor.
    machine: Option<cadvisor_view::MachineFacts>,
}

pub struct Collector {
    config: CollectorConfig,
    cgroups: Cgroups,
    kubelet_cgroup: Option<ProcessCgroup>,
    /// The runtime's pid found last, checked by name before it is used again.
    runtime_pid: Mutex<Option<u32>>,
    cache: Arc<RwLock<Snapshot>>,
    state: Mutex<SamplerState>,
}

/// cAdvisor's instantaneous rate: core-nanoseconds per second between two samples; None when
/// time did not advance or the counter went backwards (a recreated cgroup).
pub fn usage_nano_cores(
    prev_ns: u64,
    prev_at: Instant,
    cur_ns: u64,
    cur_at: Instant,
) -> Option<u64> {
    let dt = cur_at.checked_duration_since(prev_at)?.as_nanos();
    if dt == 0 || cur_ns < prev_ns {
        return None;
    }
    Some(((cur_ns - prev_ns) as f64 / dt as f64 * 1e9) as u64)
}

fn is_ignored_interface(name: &str) -> bool {
    let lower = name.to_lowercase();
    IGNORED_INTERFACE_PREFIXES
        .iter()
        .any(|p| lower.starts_with(p))
}

/// NetworkStats from a `net/dev` listing: ignored interfaces dropped, eth0 inlined.
pub fn network_stats(time: Time, counters: &[InterfaceCounters]) -> NetworkStats {
    let interfaces: Vec<InterfaceStats> = counters
        .iter()
        .filter(|c| !is_ignored_interface(&c.name))
        .map(|c| InterfaceStats {
            name: c.name.clone(),
            rx_bytes: Some(c.rx_bytes),
            rx_errors: Some(c.rx_errors),
            tx_bytes: Some(c.tx_bytes),
            tx_errors: Some(c.tx_errors),
        })
        .collect();
    NetworkStats {
        time,
        default_interface: interfaces
            .iter()
            .find(|i| i.name == DEFAULT_INTERFACE)
            .cloned()
            .unwrap_or_default(),
        interfaces,
    }
}

fn fs_stats(time: Time, cap: Option<FsCapacity>, used: Option<DiskUsage>) -> FsStats {
    FsStats {
        time,
        available_bytes: cap.map(|c| c.available),
        capacity_bytes: cap.map(|c| c.capacity),
        used_bytes: used.map(|u| u.bytes),
        inodes_free: cap.map(|c| c.inodes_free),
        inodes: cap.map(|c| c.inodes),
        inodes_used: used.map(|u| u.inodes),
    }
}

/// Per-tick context: one clock reading for every value of the snapshot.
struct Tick<'a> {
    now: Time,
    at: Instant,
    state: &'a mut SamplerState,
    errors: Vec<String>,
    current_cpu: HashMap<String, CpuPoint>,
    walked: HashSet<PathBuf>,
}

impl Tick<'_> {
    fn error(&mut self, e: impl std::fmt::Display) {
        tracing::warn!(error = %e, "stats collection");
        self.errors.push(e.to_string());
    }

    fn cpu(&mut self, key: &str, sample: Option<&CgroupSample>) -> Option<CpuStats> {
        let usage_ns = sample?.cpu_usage_ns?;
        let psi = sample?.pressure.map(|p| p.cpu.into());
        let rate = self
            .state
            .previous_cpu
            .get(key)
            .and_then(|p| usage_nano_cores(p.usage_ns, p.at, usage_ns, self.at));
        self.current_cpu.insert(
            key.to_string(),
            CpuPoint {
                at: self.at,
                usage_ns,
            },
        );
        Some(CpuStats {
            time: self.now,
            usage_nano_cores: rate,
            usage_core_nano_seconds: Some(usage_ns),
            psi,
        })
    }

    /// The `io` stats: pressure only, so only where pressure was read.
    fn io(&self, sample: Option<&CgroupSample>) -> Option<IoStats> {
        let pressure = sample?.pressure?;
        Some(IoStats {
            time: self.now,
            psi: Some(pressure.io.into()),
        })
    }

    fn memory(&self, sample: &CgroupSample) -> Option<MemoryStats> {
        let m = sample.memory.as_ref()?;
        Some(MemoryStats {
            time: self.now,
            available_bytes: m.available(),
            usage_bytes: Some(m.usage),
            working_set_bytes: Some(m.working_set()),
            rss_bytes: Some(m.rss),
            page_faults: Some(m.page_faults),
            major_page_faults: Some(m.major_page_faults),
            psi: sample.pressure.map(|p| p.memory.into()),
        })
    }

    fn walk(&mut self, dir: &Path) -> Option<DiskUsage> {
        self.walked.insert(dir.to_path_buf());
        match self.state.disk.get(dir, self.at) {
            Ok(u) => Some(u),
            Err(e) if e.is_not_found() => None,
            Err(e) => {
                self.error(e);
                None
            }
        }
    }
}

impl Collector {
    pub fn new(config: CollectorConfig, cgroups: Cgroups) -> Self {
        let kubelet_cgroup = config.kubelet_cgroup.clone().or_else(|| {
            let path = config.proc_root.join("self/cgroup");
            read_string(&path)
                .ok()
                .and_then(|t| cgroups.process_cgroup(&t))
        });
        Collector {
            state: Mutex::new(SamplerState {
                previous_cpu: HashMap::new(),
                disk: DiskUsageCache::new(config.disk_usage_interval),
                machine: None,
            }),
            config,
            cgroups,
            kubelet_cgroup,
            runtime_pid: Mutex::new(None),
            cache: Arc::new(RwLock::new(Snapshot::default())),
        }
    }

    fn runtime_cgroup(&self) -> Option<ProcessCgroup> {
        if let Some(cg) = &self.config.runtime_cgroup {
            return Some(cg.clone());
        }
        let name = self.config.runtime_process.as_deref()?;
        let root = &self.config.proc_root;
        let mut last = self.runtime_pid.lock().unwrap_or_else(|e| e.into_inner());
        let pid = last
            .filter(|pid| process_name(root, *pid).as_deref() == Some(name))
            .or_else(|| find_process(root, name));
        *last = pid;
        cgroup_of_pid(&self.cgroups, root, pid?).ok()
    }

    pub fn config(&self) -> &CollectorConfig {
        &self.config
    }

    /// The shared cache, for readers that outlive the collector's borrow.
    pub fn snapshot_handle(&self) -> Arc<RwLock<Snapshot>> {
        self.cache.clone()
    }

    pub fn snapshot(&self) -> Snapshot {
        self.cache.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The `/stats/summary` body from the cache; None before the first tick.
    pub fn summary(&self, only_cpu_and_memory: bool) -> Option<Summary> {
        let snap = self.cache.read().unwrap_or_else(|p| p.into_inner());
        let s = snap.summary.as_ref()?;
        Some(if only_cpu_and_memory {
            s.cpu_and_memory_only()
        } else {
            s.clone()
        })
    }

    /// The `/metrics/resource` body from the cache.
    pub fn metrics_resource(&self) -> String {
        let snap = self.cache.read().unwrap_or_else(|p| p.into_inner());
        let error = snap.summary.is_none() || !snap.errors.is_empty();
        render_resource_metrics(snap.summary.as_ref(), error)
    }

    /// The `/metrics/cadvisor` body from the cache.
    pub fn metrics_cadvisor(&self) -> String {
        let snap = self.cache.read().unwrap_or_else(|p| p.into_inner());
        render_cadvisor_metrics(snap.summary.as_ref().map(|_| &snap.cadvisor))
    }

    /// Housekeeping: a snapshot now, then one per interval, until `shutdown` resolves. The
    /// file reads and walks run on a blocking thread.
    pub async fn run<L: PodLister>(
        self: Arc<Self>,
        lister: Arc<L>,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        let mut ticker = tokio::time::interval(self.config.housekeeping_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                _ = ticker.tick() => {}
            }
            let (me, l) = (self.clone(), lister.clone());
            let started = Instant::now();
            match tokio::task::spawn_blocking(move || me.collect(&l.running_pods())).await {
                Ok(()) => tracing::debug!(
                    took_ms = started.elapsed().as_millis() as u64,
                    "stats snapshot taken"
                ),
                Err(e) => tracing::error!(error = %e, "stats housekeeping task failed"),
            }
        }
    }

    /// Takes one snapshot of `pods` and the node and stores it in the cache. Blocking.
    pub fn collect(&self, pods: &[PodInfo]) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut tick = Tick {
            now: Time(Utc::now()),
            at: Instant::now(),
            state: &mut state,
            errors: Vec::new(),
            current_cpu: HashMap::new(),
            walked: HashSet::new(),
        };
        let node_fs = match statvfs(&self.config.node_fs_dir) {
            Ok(c) => Some(c),
            Err(e) => {
                tick.error(e);
                None
            }
        };
        let image_fs = match statvfs(&self.config.image_fs_dir) {
            Ok(c) => Some(c),
            Err(e) => {
                tick.error(e);
                None
            }
        };
        let node = self.node_stats(&mut tick, node_fs, image_fs);
        let pod_infos = pods;
        let pods: Vec<PodStats> = pods
            .iter()
            .filter_map(|p| self.pod_stats(&mut tick, p, node_fs, image_fs))
            .collect();
        let cadvisor = self.cadvisor_snapshot(&mut tick, pod_infos);
        let Tick {
            now,
            errors,
            current_cpu,
            walked,
            ..
        } = tick;
        // Entries of cgroups not seen this tick go, so a recreated cgroup starts fresh.
        state.previous_cpu = current_cpu;
        state.disk.retain(&walked);
        drop(state);
        let claims: Vec<_> = pods
            .iter()
            .flat_map(|p| &p.volume_stats)
            .filter_map(|v| Some((v.pvc_ref.as_ref()?, &v.fs)))
            .collect();
        crate::metrics::set_volume_stats(&claims);
        let mut cache = self.cache.write().unwrap_or_else(|p| p.into_inner());
        *cache = Snapshot {
            summary: Some(Summary { node, pods }),
            taken_at: Some(now.0),
            errors,
            cadvisor,
        };
    }

    fn read_cgroup(&self, tick: &mut Tick, cg: &ProcessCgroup) -> Option<CgroupSample> {
        match self.cgroups.read_process(cg) {
            Ok(mut s) => {
                s.pressure = self.pressure(tick, &cg.cpu);
                Some(s)
            }
            Err(e) if e.is_not_found() => None,
            Err(e) => {
                tick.error(e);
                None
            }
        }
    }

    /// The cgroup's pressure, with the KubeletPSI gate on a v2 host; None otherwise (v1 has
    /// no per-cgroup pressure).
    fn pressure(&self, tick: &mut Tick, cgroup: &str) -> Option<Pressure> {
        if !self.config.psi {
            return None;
        }
        match self.cgroups.pressure(cgroup) {
            Ok(p) => p,
            Err(e) => {
                tick.error(e);
                None
            }
        }
    }

    fn node_stats(
        &self,
        tick: &mut Tick,
        node_fs: Option<FsCapacity>,
        image_fs: Option<FsCapacity>,
    ) -> NodeStats {
        let proc_root = &self.config.proc_root;
        let stat_path = proc_root.join("stat");
        let boot = match read_string(&stat_path).and_then(|t| parse_btime(&stat_path, &t)) {
            Ok(s) => Utc.timestamp_opt(s, 0).single(),
            Err(e) => {
                tick.error(e);
                None
            }
        };
        let start_time = Time(boot.unwrap_or(self.config.kubelet_start_time));

        let root = match self.cgroups.read("/") {
            Ok(mut s) => {
                // The root cgroup's files, as cAdvisor reads the node's.
                s.pressure = self.pressure(tick, "/");
                Some(s)
            }
            Err(e) => {
                tick.error(e);
                None
            }
        };
        let cpu = tick.cpu("/", root.as_ref());
        let io = tick.io(root.as_ref());
        // The node's memory limit is its capacity (MemTotal), as cAdvisor sets for "/".
        let meminfo_path = proc_root.join("meminfo");
        let mem_total =
            match read_string(&meminfo_path).and_then(|t| parse_mem_total(&meminfo_path, &t)) {
                Ok(total) => Some(total),
                Err(e) => {
                    tick.error(e);
                    None
                }
            };
        let memory = root.as_ref().and_then(|r| tick.memory(r)).map(|mut m| {
            m.available_bytes = available_bytes(mem_total, m.working_set_bytes.unwrap_or(0));
            m
        });

        let net_path = proc_root.join("1/net/dev");
        let network = match read_string(&net_path).and_then(|t| parse_net_dev(&net_path, &t)) {
            Ok(c) => Some(network_stats(tick.now, &c)),
            Err(e) => {
                tick.error(e);
                None
            }
        };

        let image_used = self
            .config
            .image_fs_usage_dir
            .as_ref()
            .and_then(|d| tick.walk(d));
        let image = image_fs.map(|c| fs_stats(tick.now, Some(c), image_used));
        let runtime = image.as_ref().map(|i| RuntimeStats {
            image_fs: Some(i.clone()),
            // One filesystem for images and writable layers: containerd reports both alike.
            container_fs: Some(i.clone()),
        });

        let mut system_containers = Vec::new();
        let mut sys =
            |tick: &mut Tick, name: &str, cg: &ProcessCgroup, start: Option<DateTime<Utc>>| {
                let Some(sample) = self.read_cgroup(tick, cg) else {
                    return;
                };
                let start = start
                    .or_else(|| {
                        self.cgroups
                            .creation_time(&cg.memory)
                            .map(DateTime::<Utc>::from)
                    })
                    .unwrap_or(start_time.0);
                system_containers.push(ContainerStats {
                    name: name.to_string(),
                    start_time: Time(start),
                    cpu: tick.cpu(&format!("system:{name}"), Some(&sample)),
                    memory: tick.memory(&sample),
                    io: tick.io(Some(&sample)),
                    accelerators: Vec::new(),
                    rootfs: None,
                    logs: None,
                    user_defined_metrics: Vec::new(),
                    swap: None,
                });
            };
        if let Some(cg) = &self.kubelet_cgroup {
            sys(
                tick,
                SYSTEM_CONTAINER_KUBELET,
                cg,
                Some(self.config.kubelet_start_time),
            );
        }
        if let Some(cg) = self.runtime_cgroup() {
            sys(tick, SYSTEM_CONTAINER_RUNTIME, &cg, None);
        }
        sys(
            tick,
            SYSTEM_CONTAINER_PODS,
            &ProcessCgroup::same(&self.config.pods_cgroup),
            None,
        );

        NodeStats {
            node_name: self.config.node_name.clone(),
            system_containers,
            start_time,
            cpu,
            memory,
            io,
            network,
            fs: node_fs.map(|c| {
                fs_stats(
                    tick.now,
                    Some(c),
                    Some(DiskUsage {
                        bytes: c.used,
                        inodes: c.inodes_used(),
                    }),
                )
            }),
            runtime,
            rlimit: Some(self.rlimit(tick)),
            swap: None,
        }
    }

    /// maxpid = min(pid_max, threads-max); curproc = total tasks from /proc/loadavg.
    fn rlimit(&self, tick: &mut Tick) -> RlimitStats {
        let kernel = self.config.proc_root.join("sys/kernel");
        let mut max = None::<u64>;
        for f in ["pid_max", "threads-max"] {
            match read_u64(&kernel.join(f)) {
                Ok(v) => max = Some(max.map_or(v, |m| m.min(v))),
                Err(e) => tick.error(e),
            }
        }
        let loadavg_path = self.config.proc_root.join("loadavg");
        let curproc =
            match read_string(&loadavg_path).and_then(|t| parse_loadavg_tasks(&loadavg_path, &t)) {
                Ok(tasks) => Some(tasks),
                Err(e) => {
                    tick.error(e);
                    None
                }
            };
        RlimitStats {
            time: tick.now,
            maxpid: max.map(|v| v as i64),
            curproc: curproc.map(|v| v as i64),
        }
    }

    fn pod_stats(
        &self,
        tick: &mut Tick,
        pod: &PodInfo,
        node_fs: Option<FsCapacity>,
        image_fs: Option<FsCapacity>,
    ) -> Option<PodStats> {
        let span = tracing::debug_span!("pod", pod = %pod.name, namespace = %pod.namespace, uid = %pod.uid);
        let _enter = span.enter();
        let Some(pod_sample) = self.read_cgroup(tick, &ProcessCgroup::same(&pod.cgroup_parent))
        else {
            tracing::debug!(cgroup = %pod.cgroup_parent, "pod cgroup gone; pod left out of this snapshot");
            return None;
        };

        let mut containers = Vec::new();
        let mut ephemeral = DiskUsage::default();
        for c in &pod.containers {
            let Some(sample) = self.read_cgroup(tick, &ProcessCgroup::same(&c.cgroup_path)) else {
                tracing::debug!(container = %c.name, cgroup = %c.cgroup_path, "container cgroup gone");
                continue;
            };
            let rootfs_used = c.rootfs_upper.as_ref().and_then(|d| tick.walk(d));
            let logs_used = c.log_dir.as_ref().and_then(|d| tick.walk(d));
            ephemeral = ephemeral + rootfs_used.unwrap_or_default() + logs_used.unwrap_or_default();
            containers.push(ContainerStats {
                name: c.name.clone(),
                start_time: Time(c.start_time),
                cpu: tick.cpu(&c.cgroup_path, Some(&sample)),
                memory: tick.memory(&sample),
                io: tick.io(Some(&sample)),
                accelerators: Vec::new(),
                rootfs: rootfs_used.map(|u| fs_stats(tick.now, image_fs, Some(u))),
                logs: logs_used.map(|u| fs_stats(tick.now, node_fs, Some(u))),
                user_defined_metrics: Vec::new(),
                swap: None,
            });
        }

        let mut volume_stats = Vec::new();
        for v in &pod.volumes {
            let fs = match v.measure {
                Measure::Walk => {
                    let Some(used) = tick.walk(&v.path) else {
                        continue;
                    };
                    if v.ephemeral {
                        ephemeral = ephemeral + used;
                    }
                    fs_stats(tick.now, statvfs(&v.path).ok(), Some(used))
                }
                Measure::StatFs => {
                    let Ok(c) = statvfs(&v.path) else { continue };
                    let used = DiskUsage {
                        bytes: c.used,
                        inodes: c.inodes_used(),
                    };
                    fs_stats(tick.now, Some(c), Some(used))
                }
                Measure::DeviceSize => {
                    let size = match device_size(&v.path) {
                        Ok(s) => s,
                        Err(e) => {
                            tracing::debug!(volume = %v.name, path = %v.path.display(), error = %e, "block volume's size unknown");
                            continue;
                        }
                    };
                    FsStats {
                        time: tick.now,
                        available_bytes: Some(0),
                        capacity_bytes: Some(size),
                        used_bytes: Some(0),
                        inodes_free: Some(0),
                        inodes: Some(0),
                        inodes_used: Some(0),
                    }
                }
                Measure::Reported => {
                    let reported = self.config.reported_volumes.read();
                    let Some(u) = reported.ok().and_then(|m| m.get(&v.path).copied()) else {
                        continue;
                    };
                    FsStats {
                        time: tick.now,
                        available_bytes: u.available,
                        capacity_bytes: u.capacity,
                        used_bytes: u.used,
                        inodes_free: u.inodes_free,
                        inodes: u.inodes,
                        inodes_used: u.inodes_used,
                    }
                }
            };
            volume_stats.push(VolumeStats {
                fs,
                name: v.name.clone(),
                pvc_ref: v.pvc.clone(),
                volume_health_stats: None,
            });
        }

        for f in &pod.host_files {
            if let Some(used) = tick.walk(f) {
                ephemeral = ephemeral + used;
            }
        }

        let network = pod.pause_pid.and_then(|pid| {
            let path = self.config.proc_root.join(pid.to_string()).join("net/dev");
            match read_string(&path).and_then(|t| parse_net_dev(&path, &t)) {
                Ok(c) => Some(network_stats(tick.now, &c)),
                // The sandbox exited between listing and reading.
                Err(e) if e.is_not_found() => None,
                Err(e) => {
                    tick.error(e);
                    None
                }
            }
        });

        let process_count = match self.cgroups.process_count(&pod.cgroup_parent) {
            Ok(n) => Some(n),
            Err(e) => {
                tick.error(e);
                None
            }
        };

        Some(PodStats {
            pod_ref: PodReference {
                name: pod.name.clone(),
                namespace: pod.namespace.clone(),
                uid: pod.uid.clone(),
            },
            start_time: Time(pod.start_time),
            containers,
            cpu: tick.cpu(&pod.cgroup_parent, Some(&pod_sample)),
            memory: tick.memory(&pod_sample),
            io: tick.io(Some(&pod_sample)),
            network,
            volume_stats,
            ephemeral_storage: Some(fs_stats(tick.now, node_fs, Some(ephemeral))),
            process_stats: Some(ProcessStats { process_count }),
            swap: None,
        })
    }
}

mod cadvisor_view;

#[cfg(test)]
mod tests;
