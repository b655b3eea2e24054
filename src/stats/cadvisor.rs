//! `/metrics/cadvisor`: cAdvisor's `container_*` and `machine_*` series from the collector's
//! snapshot, as the upstream kubelet serves them on containerd.
//!
//! What upstream serves is fixed by its server: cAdvisor's collectors with the kubelet's
//! metric set (cpu, memory, cpu load, disk I/O, disk usage, network, processes, OOM events;
//! no per-cpu split, so cpu usage has the one `cpu="total"` series), and the kubelet's label
//! function, which gives every container series exactly `container`, `id`, `image`, `name`,
//! `namespace` and `pod`. On containerd that makes:
//! - `id` the cgroup path; `name` the container's ID (containerd's handler aliases a container
//!   by its ID), empty for plain cgroups (`/`, `/kubepods`, a pod's cgroup);
//! - `image`, `pod`, `namespace`, `container` from the container's image and CRI labels. The
//!   sandbox has no container-name label on containerd, so its series say `container=""`
//!   with the pause image; the pod cgroup says `container=""`, `image=""` with the pod's
//!   name and namespace (upstream looks the pod up by its cgroup);
//! - network series only for the root cgroup and sandboxes (containerd's handler gives the
//!   network to the sandbox only), filesystem usage only for the root cgroup (containerd's
//!   handler reports no filesystem).
//!
//! Help texts, types and label names are cAdvisor's (v0.53, what v1.34 vendors), with no
//! stability prefix, as the kubelet registers cAdvisor's collectors raw. Stats series carry
//! the snapshot's time as their timestamp; spec series carry none, as upstream.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::parse::InterfaceCounters;
use crate::cgroups::detail::CgroupDetail;
use crate::metrics::text::{encode, Family, MetricType};

/// Limits above this are "unlimited" and reported as 0 (cAdvisor's maxMemorySize).
const UNLIMITED_ABOVE: u64 = 1 << 62;

/// The six labels every container series has (values empty where upstream's are).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerLabels {
    pub id: String,
    pub name: String,
    pub image: String,
    pub pod: String,
    pub namespace: String,
    pub container: String,
}

/// One filesystem of the root container (`device` is the mount's source, e.g. `/dev/vda1`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FsDevice {
    pub device: String,
    pub capacity: u64,
    pub usage: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

/// Block I/O of one device, named as cAdvisor names it (`/dev/sda`; empty when unknown).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamedDeviceIo {
    pub device: String,
    pub io: crate::cgroups::detail::DeviceIo,
}

/// Everything `/metrics/cadvisor` says about one cgroup.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CadvisorContainer {
    pub labels: ContainerLabels,
    /// The cgroup's creation (upstream: the earliest mtime of its directories), unix seconds.
    pub start_time: i64,
    pub detail: CgroupDetail,
    pub io: Vec<NamedDeviceIo>,
    pub network: Vec<InterfaceCounters>,
    pub fs: Vec<FsDevice>,
}

/// cAdvisor's machine info, the parts its machine collector reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineInfo {
    pub machine_id: String,
    pub system_uuid: String,
    pub boot_id: String,
    pub cores: u64,
    pub physical_cores: u64,
    pub sockets: u64,
    pub memory_bytes: u64,
    pub swap_bytes: u64,
    /// When it was read (the machine series' timestamp), ms.
    pub taken_at_ms: i64,
}

/// The kernel and OS for `cadvisor_version_info`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionInfo {
    pub kernel_version: String,
    pub os_version: String,
}

/// The part of a snapshot `/metrics/cadvisor` renders.
#[derive(Debug, Clone, Default)]
pub struct CadvisorSnapshot {
    pub taken_at: Option<DateTime<Utc>>,
    pub containers: Vec<CadvisorContainer>,
    pub machine: Option<MachineInfo>,
    pub version: Option<VersionInfo>,
}

type Labels = Vec<(&'static str, String)>;

/// Families by name, each created by its first series.
#[derive(Default)]
struct Families(BTreeMap<&'static str, Family>);

impl Families {
    fn add(
        &mut self,
        name: &'static str,
        kind: MetricType,
        help: &'static str,
        labels: Labels,
        value: f64,
        ts: Option<i64>,
    ) {
        self.0
            .entry(name)
            .or_insert_with(|| Family::new(name, kind, help))
            .sample(labels, value, ts);
    }

    fn render(self) -> String {
        encode(self.0.into_values())
    }
}

fn spec_memory(v: u64) -> f64 {
    if v > UNLIMITED_ABOVE {
        0.0
    } else {
        v as f64
    }
}

const GAUGE: MetricType = MetricType::Gauge;
const COUNTER: MetricType = MetricType::Counter;

/// Renders `/metrics/cadvisor` from one snapshot; `None` (nothing collected yet) gives the
/// scrape-error gauges at 1, as upstream does when cAdvisor cannot answer.
pub fn render_cadvisor_metrics(snapshot: Option<&CadvisorSnapshot>) -> String {
    let mut f = Families::default();
    let container_error = snapshot.is_none_or(|s| s.taken_at.is_none());
    if let Some(v) = snapshot.and_then(|s| s.version.as_ref()) {
        f.add(
            "cadvisor_version_info",
            GAUGE,
            "A metric with a constant '1' value labeled by kernel version, OS version, docker version, cadvisor version & cadvisor revision.",
            vec![
                ("cadvisorRevision", String::new()),
                ("cadvisorVersion", String::new()),
                ("dockerVersion", String::new()),
                ("kernelVersion", v.kernel_version.clone()),
                ("osVersion", v.os_version.clone()),
            ],
            1.0,
            None,
        );
    }
    if let Some(s) = snapshot {
        let ts = s.taken_at.map(|t| t.timestamp_millis());
        let now_s = s.taken_at.map_or(0, |t| t.timestamp());
        for c in &s.containers {
            container_series(&mut f, c, ts, now_s);
        }
    }
    f.add(
        "container_scrape_error",
        GAUGE,
        "1 if there was an error while getting container metrics, 0 otherwise",
        vec![],
        if container_error { 1.0 } else { 0.0 },
        None,
    );
    let machine = snapshot.and_then(|s| s.machine.as_ref());
    if let Some(m) = machine {
        machine_series(&mut f, m);
    }
    f.add(
        "machine_scrape_error",
        GAUGE,
        "1 if there was an error while getting machine metrics, 0 otherwise.",
        vec![],
        if machine.is_none() { 1.0 } else { 0.0 },
        None,
    );
    f.render()
}

fn machine_series(f: &mut Families, m: &MachineInfo) {
    let base = || {
        vec![
            ("boot_id", m.boot_id.clone()),
            ("machine_id", m.machine_id.clone()),
            ("system_uuid", m.system_uuid.clone()),
        ]
    };
    let ts = Some(m.taken_at_ms);
    for (name, help, value) in [
        (
            "machine_cpu_physical_cores",
            "Number of physical CPU cores.",
            m.physical_cores,
        ),
        ("machine_cpu_cores", "Number of logical CPU cores.", m.cores),
        ("machine_cpu_sockets", "Number of CPU sockets.", m.sockets),
        (
            "machine_memory_bytes",
            "Amount of memory installed on the machine.",
            m.memory_bytes,
        ),
        (
            "machine_swap_bytes",
            "Amount of swap memory available on the machine.",
            m.swap_bytes,
        ),
        ("machine_nvm_avg_power_budget_watts", "NVM power budget.", 0),
    ] {
        f.add(name, GAUGE, help, base(), value as f64, ts);
    }
    // No NVM on the nodes this agent knows of: cAdvisor reports both modes at 0 then.
    for mode in ["app_direct_mode", "memory_mode"] {
        let mut l = base();
        l.push(("mode", mode.to_string()));
        f.add(
            "machine_nvm_capacity",
            GAUGE,
            "NVM capacity value labeled by NVM mode (memory mode or app direct mode).",
            l,
            0.0,
            ts,
        );
    }
}

fn container_series(f: &mut Families, c: &CadvisorContainer, ts: Option<i64>, now_s: i64) {
    let base = || {
        let l = &c.labels;
        vec![
            ("container", l.container.clone()),
            ("id", l.id.clone()),
            ("image", l.image.clone()),
            ("name", l.name.clone()),
            ("namespace", l.namespace.clone()),
            ("pod", l.pod.clone()),
        ]
    };
    let with = |k: &'static str, v: &str| {
        let mut l = base();
        l.push((k, v.to_string()));
        l
    };
    let d = &c.detail;

    // Spec (no timestamps).
    f.add(
        "container_start_time_seconds",
        GAUGE,
        "Start time of the container since unix epoch in seconds.",
        base(),
        c.start_time as f64,
        None,
    );
    if d.spec.has_cpu {
        f.add(
            "container_spec_cpu_period",
            GAUGE,
            "CPU period of the container.",
            base(),
            d.spec.cpu_period as f64,
            None,
        );
        if d.spec.cpu_quota != 0 {
            f.add(
                "container_spec_cpu_quota",
                GAUGE,
                "CPU quota of the container.",
                base(),
                d.spec.cpu_quota as f64,
                None,
            );
        }
        f.add(
            "container_spec_cpu_shares",
            GAUGE,
            "CPU share of the container.",
            base(),
            d.spec.cpu_shares as f64,
            None,
        );
    }
    if d.spec.has_memory {
        for (name, help, v) in [
            (
                "container_spec_memory_limit_bytes",
                "Memory limit for the container.",
                d.spec.memory_limit,
            ),
            (
                "container_spec_memory_swap_limit_bytes",
                "Memory swap limit for the container.",
                d.spec.memory_swap_limit,
            ),
            (
                "container_spec_memory_reservation_limit_bytes",
                "Memory reservation limit for the container.",
                d.spec.memory_reservation,
            ),
        ] {
            f.add(name, GAUGE, help, base(), spec_memory(v), None);
        }
    }

    f.add(
        "container_last_seen",
        GAUGE,
        "Last time a container was seen by the exporter",
        base(),
        now_s as f64,
        ts,
    );

    // CPU.
    let cpu = d.cpu.unwrap_or_default();
    f.add(
        "container_cpu_user_seconds_total",
        COUNTER,
        "Cumulative user cpu time consumed in seconds.",
        base(),
        cpu.user_ns as f64 / 1e9,
        ts,
    );
    f.add(
        "container_cpu_system_seconds_total",
        COUNTER,
        "Cumulative system cpu time consumed in seconds.",
        base(),
        cpu.system_ns as f64 / 1e9,
        ts,
    );
    // Without per-cpu figures cAdvisor writes the total only when it is above 0.
    if cpu.usage_ns > 0 {
        f.add(
            "container_cpu_usage_seconds_total",
            COUNTER,
            "Cumulative cpu time consumed in seconds.",
            with("cpu", "total"),
            cpu.usage_ns as f64 / 1e9,
            ts,
        );
    }
    if d.spec.cpu_quota != 0 {
        f.add(
            "container_cpu_cfs_periods_total",
            COUNTER,
            "Number of elapsed enforcement period intervals.",
            base(),
            cpu.periods as f64,
            ts,
        );
        f.add(
            "container_cpu_cfs_throttled_periods_total",
            COUNTER,
            "Number of throttled period intervals.",
            base(),
            cpu.throttled_periods as f64,
            ts,
        );
        f.add(
            "container_cpu_cfs_throttled_seconds_total",
            COUNTER,
            "Total time duration the container has been throttled.",
            base(),
            cpu.throttled_ns as f64 / 1e9,
            ts,
        );
    }
    // The kubelet runs cAdvisor without its load reader: these are always 0 upstream.
    f.add(
        "container_cpu_load_average_10s",
        GAUGE,
        "Value of container cpu load average over the last 10 seconds.",
        base(),
        0.0,
        ts,
    );
    f.add(
        "container_cpu_load_d_average_10s",
        GAUGE,
        "Value of container cpu load.d average over the last 10 seconds.",
        base(),
        0.0,
        ts,
    );
    for state in [
        "iowaiting",
        "running",
        "sleeping",
        "stopped",
        "uninterruptible",
    ] {
        f.add(
            "container_tasks_state",
            GAUGE,
            "Number of tasks in given state",
            with("state", state),
            0.0,
            ts,
        );
    }

    // Memory.
    let m = d.memory.unwrap_or_default();
    for (name, kind, help, v) in [
        (
            "container_memory_cache",
            GAUGE,
            "Number of bytes of page cache memory.",
            m.cache,
        ),
        ("container_memory_rss", GAUGE, "Size of RSS in bytes.", m.rss),
        (
            "container_memory_kernel_usage",
            GAUGE,
            "Size of kernel memory allocated in bytes.",
            m.kernel,
        ),
        (
            "container_memory_mapped_file",
            GAUGE,
            "Size of memory mapped files in bytes.",
            m.mapped_file,
        ),
        (
            "container_memory_swap",
            GAUGE,
            "Container swap usage in bytes.",
            m.swap,
        ),
        (
            "container_memory_failcnt",
            COUNTER,
            "Number of memory usage hits limits",
            m.failcnt,
        ),
        (
            "container_memory_usage_bytes",
            GAUGE,
            "Current memory usage in bytes, including all memory regardless of when it was accessed",
            m.usage,
        ),
        (
            "container_memory_max_usage_bytes",
            GAUGE,
            "Maximum memory usage recorded in bytes",
            m.max_usage,
        ),
        (
            "container_memory_working_set_bytes",
            GAUGE,
            "Current working set in bytes.",
            m.working_set,
        ),
        (
            "container_memory_total_active_file_bytes",
            GAUGE,
            "Current total active file in bytes.",
            m.active_file,
        ),
        (
            "container_memory_total_inactive_file_bytes",
            GAUGE,
            "Current total inactive file in bytes.",
            m.inactive_file,
        ),
        (
            "container_oom_events_total",
            COUNTER,
            "Count of out of memory events observed for the container",
            m.oom_kills,
        ),
    ] {
        f.add(name, kind, help, base(), v as f64, ts);
    }
    for (failure, scope, v) in [
        ("pgfault", "container", m.pgfault),
        ("pgmajfault", "container", m.pgmajfault),
        ("pgfault", "hierarchy", m.pgfault),
        ("pgmajfault", "hierarchy", m.pgmajfault),
    ] {
        let mut l = base();
        l.push(("failure_type", failure.to_string()));
        l.push(("scope", scope.to_string()));
        f.add(
            "container_memory_failures_total",
            COUNTER,
            "Cumulative count of memory allocation failures.",
            l,
            v as f64,
            ts,
        );
    }

    // Block I/O per device.
    for dev in &c.io {
        let get = |map: &BTreeMap<String, u64>, op: &str| map.get(op).copied();
        for (name, help, v) in [
            (
                "container_fs_reads_bytes_total",
                "Cumulative count of bytes read",
                get(&dev.io.bytes, "Read"),
            ),
            (
                "container_fs_writes_bytes_total",
                "Cumulative count of bytes written",
                get(&dev.io.bytes, "Write"),
            ),
            (
                "container_fs_reads_total",
                "Cumulative count of reads completed",
                get(&dev.io.ops, "Read"),
            ),
            (
                "container_fs_writes_total",
                "Cumulative count of writes completed",
                get(&dev.io.ops, "Write"),
            ),
        ] {
            f.add(
                name,
                COUNTER,
                help,
                with("device", &dev.device),
                v.unwrap_or(0) as f64,
                ts,
            );
        }
        for (op, v) in &dev.io.bytes {
            let mut l = base();
            l.push(("device", dev.device.clone()));
            l.push(("major", dev.io.major.to_string()));
            l.push(("minor", dev.io.minor.to_string()));
            l.push(("operation", op.clone()));
            // cAdvisor gives this family no timestamp.
            f.add(
                "container_blkio_device_usage_total",
                COUNTER,
                "Blkio Device bytes usage",
                l,
                *v as f64,
                None,
            );
        }
    }

    // Filesystems (the root container only).
    for fs in &c.fs {
        for (name, help, v) in [
            (
                "container_fs_inodes_free",
                "Number of available Inodes",
                fs.inodes_free,
            ),
            ("container_fs_inodes_total", "Number of Inodes", fs.inodes),
            (
                "container_fs_limit_bytes",
                "Number of bytes that can be consumed by the container on this filesystem.",
                fs.capacity,
            ),
            (
                "container_fs_usage_bytes",
                "Number of bytes that are consumed by the container on this filesystem.",
                fs.usage,
            ),
        ] {
            f.add(name, GAUGE, help, with("device", &fs.device), v as f64, ts);
        }
    }

    // Network per interface.
    for i in &c.network {
        for (name, help, v) in [
            (
                "container_network_receive_bytes_total",
                "Cumulative count of bytes received",
                i.rx_bytes,
            ),
            (
                "container_network_receive_packets_total",
                "Cumulative count of packets received",
                i.rx_packets,
            ),
            (
                "container_network_receive_packets_dropped_total",
                "Cumulative count of packets dropped while receiving",
                i.rx_dropped,
            ),
            (
                "container_network_receive_errors_total",
                "Cumulative count of errors encountered while receiving",
                i.rx_errors,
            ),
            (
                "container_network_transmit_bytes_total",
                "Cumulative count of bytes transmitted",
                i.tx_bytes,
            ),
            (
                "container_network_transmit_packets_total",
                "Cumulative count of packets transmitted",
                i.tx_packets,
            ),
            (
                "container_network_transmit_packets_dropped_total",
                "Cumulative count of packets dropped while transmitting",
                i.tx_dropped,
            ),
            (
                "container_network_transmit_errors_total",
                "Cumulative count of errors encountered while transmitting",
                i.tx_errors,
            ),
        ] {
            f.add(
                name,
                COUNTER,
                help,
                with("interface", &i.name),
                v as f64,
                ts,
            );
        }
    }

    // Processes.
    if let Some(p) = d.processes {
        for (name, help, v) in [
            (
                "container_processes",
                "Number of processes running inside the container.",
                p.processes,
            ),
            (
                "container_file_descriptors",
                "Number of open file descriptors for the container.",
                p.file_descriptors,
            ),
            (
                "container_sockets",
                "Number of open sockets for the container.",
                p.sockets,
            ),
            (
                "container_threads_max",
                "Maximum number of threads allowed inside the container, infinity if value is zero",
                p.threads_max,
            ),
            (
                "container_threads",
                "Number of threads running inside the container",
                p.threads,
            ),
        ] {
            f.add(name, GAUGE, help, base(), v as f64, ts);
        }
    }

    // Pressure (the KubeletPSI gate, cgroup v2): the kernel's microseconds as seconds.
    if let Some(p) = d.pressure {
        for (name, help, v) in [
            (
                "container_pressure_cpu_stalled_seconds_total",
                "Total time duration no tasks in the container could make progress due to CPU congestion.",
                p.cpu.full.total,
            ),
            (
                "container_pressure_cpu_waiting_seconds_total",
                "Total time duration tasks in the container have waited due to CPU congestion.",
                p.cpu.some.total,
            ),
            (
                "container_pressure_memory_stalled_seconds_total",
                "Total time duration no tasks in the container could make progress due to memory congestion.",
                p.memory.full.total,
            ),
            (
                "container_pressure_memory_waiting_seconds_total",
                "Total time duration tasks in the container have waited due to memory congestion.",
                p.memory.some.total,
            ),
            (
                "container_pressure_io_stalled_seconds_total",
                "Total time duration no tasks in the container could make progress due to IO congestion.",
                p.io.full.total,
            ),
            (
                "container_pressure_io_waiting_seconds_total",
                "Total time duration tasks in the container have waited due to IO congestion.",
                p.io.some.total,
            ),
        ] {
            f.add(name, COUNTER, help, base(), v as f64 / 1e6, ts);
        }
    }
}

/// The whole exposition through a strict third-party parser (openmetrics-parser's Prometheus
/// text format: HELP and TYPE once per family, one label set per family, no duplicate
/// series, escapes), then as plain data for assertions.
#[cfg(test)]
pub(crate) mod parsed {
    use std::collections::BTreeMap;

    use openmetrics_parser::{MetricNumber, PrometheusType, PrometheusValue};

    pub(crate) type LabelMap = BTreeMap<String, String>;

    pub(crate) struct Parsed {
        /// name → (help, type)
        pub families: BTreeMap<String, (String, String)>,
        pub samples: Vec<(String, LabelMap, f64)>,
    }

    pub(crate) fn parse(text: &str) -> Parsed {
        let exposition = openmetrics_parser::prometheus::parse_prometheus(text)
            .unwrap_or_else(|e| panic!("not valid Prometheus text ({e:?}):\n{text}"));
        let mut families = BTreeMap::new();
        let mut samples = Vec::new();
        for (name, family) in &exposition.families {
            let kind = match family.family_type {
                PrometheusType::Counter => "counter",
                PrometheusType::Gauge => "gauge",
                _ => "other",
            };
            families.insert(name.clone(), (family.help.clone(), kind.to_string()));
            for s in family.iter_samples() {
                let labels: LabelMap = s
                    .get_labelset()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let number = match &s.value {
                    PrometheusValue::Gauge(n) | PrometheusValue::Unknown(n) => *n,
                    PrometheusValue::Counter(c) => c.value,
                    other => panic!("unexpected value {other:?}"),
                };
                let value = match number {
                    MetricNumber::Float(f) => f,
                    MetricNumber::Int(i) => i as f64,
                };
                samples.push((name.clone(), labels, value));
            }
        }
        // The parser merges a family written twice; the text must name each once.
        for name in families.keys() {
            for kind in ["HELP", "TYPE"] {
                let n = text.matches(&format!("# {kind} {name} ")).count();
                assert_eq!(n, 1, "# {kind} {name} appears {n} times");
            }
        }
        Parsed { families, samples }
    }

    impl Parsed {
        /// Series of `family` whose labels include `want`.
        pub(crate) fn find(&self, family: &str, want: &[(&str, &str)]) -> Vec<(&LabelMap, f64)> {
            self.samples
                .iter()
                .filter(|(n, l, _)| {
                    n == family
                        && want
                            .iter()
                            .all(|(k, v)| l.get(*k).map(String::as_str) == Some(v))
                })
                .map(|(_, l, v)| (l, *v))
                .collect()
        }

        /// The one series of `family` matching `want`.
        pub(crate) fn value(&self, family: &str, want: &[(&str, &str)]) -> f64 {
            let found = self.find(family, want);
            assert_eq!(found.len(), 1, "{family} {want:?}: {found:?}");
            found[0].1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::detail::{CgroupDetail, CpuDetail, DeviceIo, MemoryDetail};

    fn labels(id: &str, container: &str) -> ContainerLabels {
        ContainerLabels {
            id: id.into(),
            name: "0123abcd".into(),
            image: "docker.io/library/busybox:1.36".into(),
            pod: "web".into(),
            namespace: "default".into(),
            container: container.into(),
        }
    }

    #[test]
    fn nothing_collected_yet_reports_both_scrape_errors() {
        let text = render_cadvisor_metrics(None);
        let p = parsed::parse(&text);
        assert_eq!(p.value("container_scrape_error", &[]), 1.0);
        assert_eq!(p.value("machine_scrape_error", &[]), 1.0);
        assert_eq!(p.samples.len(), 2, "{text}");
    }

    #[test]
    fn every_series_parses_with_upstreams_names_labels_and_units() {
        let t = DateTime::parse_from_rfc3339("2025-06-23T19:09:26.568Z")
            .unwrap()
            .with_timezone(&Utc);
        let mut detail = CgroupDetail {
            cpu: Some(CpuDetail {
                usage_ns: 2_967_340_000,
                user_ns: 1_000_000_000,
                system_ns: 1_500_000_000,
                periods: 62,
                throttled_periods: 59,
                throttled_ns: 4_048_587_000,
            }),
            memory: Some(MemoryDetail {
                usage: 47063040,
                working_set: 30154752,
                oom_kills: 2,
                ..Default::default()
            }),
            ..Default::default()
        };
        detail.spec.has_cpu = true;
        detail.spec.cpu_quota = 50000;
        detail.spec.cpu_period = 100000;
        detail.spec.has_memory = true;
        detail.spec.memory_limit = u64::MAX;
        let mut odd = labels("/kubepods/x", "we\"ird\\na\nme");
        odd.name = "other".into();
        let snapshot = CadvisorSnapshot {
            taken_at: Some(t),
            containers: vec![
                CadvisorContainer {
                    labels: labels("/kubepods/burstable/podu/0123abcd", "app"),
                    start_time: 1750705766,
                    detail: detail.clone(),
                    io: vec![NamedDeviceIo {
                        device: "/dev/vda".into(),
                        io: DeviceIo {
                            major: 253,
                            minor: 0,
                            bytes: [("Read".to_string(), 4096), ("Write".to_string(), 512)].into(),
                            ops: [("Read".to_string(), 3)].into(),
                        },
                    }],
                    network: vec![InterfaceCounters {
                        name: "eth0".into(),
                        rx_bytes: 1048576,
                        rx_packets: 812,
                        rx_errors: 3,
                        rx_dropped: 1,
                        tx_bytes: 524288,
                        tx_packets: 401,
                        tx_errors: 1,
                        tx_dropped: 0,
                    }],
                    fs: vec![FsDevice {
                        device: "/dev/vda1".into(),
                        capacity: 1 << 30,
                        usage: 1 << 20,
                        inodes: 1000,
                        inodes_free: 900,
                    }],
                },
                CadvisorContainer {
                    labels: odd,
                    start_time: 1,
                    detail: CgroupDetail::default(),
                    ..Default::default()
                },
            ],
            machine: Some(MachineInfo {
                machine_id: "m".into(),
                system_uuid: "u".into(),
                boot_id: "b".into(),
                cores: 2,
                physical_cores: 2,
                sockets: 1,
                memory_bytes: 4 << 30,
                swap_bytes: 0,
                taken_at_ms: 1,
            }),
            version: Some(VersionInfo {
                kernel_version: "6.1.0".into(),
                os_version: "Debian GNU/Linux 12 (bookworm)".into(),
            }),
        };
        let text = render_cadvisor_metrics(Some(&snapshot));
        let p = parsed::parse(&text);

        // Every container family carries exactly the kubelet's six labels plus its own.
        let base = ["container", "id", "image", "name", "namespace", "pod"];
        for (name, labels, _) in &p.samples {
            if !name.starts_with("container_") || name == "container_scrape_error" {
                continue;
            }
            let extra: &[&str] = match name.as_str() {
                "container_cpu_usage_seconds_total" => &["cpu"],
                "container_tasks_state" => &["state"],
                "container_memory_failures_total" => &["failure_type", "scope"],
                "container_blkio_device_usage_total" => &["device", "major", "minor", "operation"],
                n if n.starts_with("container_network_") => &["interface"],
                n if n.starts_with("container_fs_") => &["device"],
                _ => &[],
            };
            let mut want: Vec<&str> = base.iter().chain(extra).copied().collect();
            want.sort();
            let got: Vec<&str> = labels.keys().map(String::as_str).collect();
            assert_eq!(got, want, "{name}");
        }
        let app = [("container", "app")];
        assert_eq!(
            p.value(
                "container_cpu_usage_seconds_total",
                &[("container", "app"), ("cpu", "total")]
            ),
            2.96734
        );
        assert_eq!(p.value("container_cpu_user_seconds_total", &app), 1.0);
        assert_eq!(
            p.value("container_cpu_cfs_throttled_periods_total", &app),
            59.0
        );
        assert_eq!(
            p.value("container_cpu_cfs_throttled_seconds_total", &app),
            4.048587
        );
        assert_eq!(p.value("container_spec_cpu_quota", &app), 50000.0);
        // An unlimited memory limit reads 0, as cAdvisor writes it.
        assert_eq!(p.value("container_spec_memory_limit_bytes", &app), 0.0);
        assert_eq!(
            p.value("container_memory_working_set_bytes", &app),
            30154752.0
        );
        assert_eq!(p.value("container_oom_events_total", &app), 2.0);
        assert_eq!(
            p.value(
                "container_network_receive_packets_dropped_total",
                &[("container", "app"), ("interface", "eth0")]
            ),
            1.0
        );
        assert_eq!(
            p.value(
                "container_fs_reads_bytes_total",
                &[("container", "app"), ("device", "/dev/vda")]
            ),
            4096.0
        );
        assert_eq!(
            p.value(
                "container_blkio_device_usage_total",
                &[("operation", "Write"), ("major", "253")]
            ),
            512.0
        );
        assert_eq!(
            p.value("container_fs_limit_bytes", &[("device", "/dev/vda1")]),
            (1u64 << 30) as f64
        );
        // A container without cpu usage has no usage series, and no quota has no cfs series.
        let odd = [("name", "other")];
        assert!(p.find("container_cpu_usage_seconds_total", &odd).is_empty());
        assert!(p.find("container_cpu_cfs_periods_total", &odd).is_empty());
        // Quotes, backslashes and newlines in label values survive the round trip.
        assert_eq!(
            p.find("container_last_seen", &odd)[0].0["container"],
            "we\"ird\\na\nme"
        );
        assert_eq!(p.value("container_last_seen", &app), t.timestamp() as f64);
        assert_eq!(
            p.value(
                "machine_cpu_cores",
                &[("machine_id", "m"), ("boot_id", "b")]
            ),
            2.0
        );
        assert_eq!(p.value("machine_scrape_error", &[]), 0.0);
        assert_eq!(p.value("container_scrape_error", &[]), 0.0);
        assert_eq!(
            p.value("cadvisor_version_info", &[("kernelVersion", "6.1.0")]),
            1.0
        );

        // Upstream's help texts and types, byte for byte where dashboards show them.
        assert_eq!(
            p.families["container_cpu_usage_seconds_total"],
            (
                "Cumulative cpu time consumed in seconds.".to_string(),
                "counter".to_string()
            )
        );
        assert_eq!(
            p.families["container_memory_working_set_bytes"],
            (
                "Current working set in bytes.".to_string(),
                "gauge".to_string()
            )
        );
        // Stats carry the snapshot's time; spec series none.
        assert!(text.contains(&format!(
            "container_memory_working_set_bytes{{container=\"app\",id=\"/kubepods/burstable/podu/0123abcd\",image=\"docker.io/library/busybox:1.36\",name=\"0123abcd\",namespace=\"default\",pod=\"web\"}} 3.0154752e+07 {}\n",
            t.timestamp_millis()
        )), "{text}");
        assert!(text.contains("container_spec_cpu_quota{container=\"app\",id=\"/kubepods/burstable/podu/0123abcd\",image=\"docker.io/library/busybox:1.36\",name=\"0123abcd\",namespace=\"default\",pod=\"web\"} 50000\n"), "{text}");
        // Families sorted by name, as Go's gatherer writes them.
        let names: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| l.split(' ').next().unwrap())
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
    }
}
